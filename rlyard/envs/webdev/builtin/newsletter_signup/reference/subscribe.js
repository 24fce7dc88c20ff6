const subscribe = document.getElementById("subscribe");
subscribe.addEventListener("submit", (event) => {
  const email = document.getElementById("email").value.trim();
  const valid = /^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(email);
  subscribe.querySelector(".error").hidden = valid;
  if (!valid) event.preventDefault();
});
