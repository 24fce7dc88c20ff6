const login = document.getElementById("login");
const alertBox = login.querySelector("[role=alert]");
login.addEventListener("submit", (event) => {
  const missing = ["email", "password"].filter((id) => !document.getElementById(id).value.trim());
  if (missing.length) {
    event.preventDefault();
    alertBox.textContent = `Please fill in your ${missing.join(" and ")}.`;
    alertBox.hidden = false;
  }
});
