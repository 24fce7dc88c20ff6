const form = document.getElementById("signup");
const rules = {
  name: (v) => (v.trim() ? "" : "Enter your full name"),
  email: (v) => (/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(v) ? "" : "Enter your email"),
  password: (v) => (v.length >= 8 ? "" : "Use at least 8 characters"),
};
form.addEventListener("submit", (event) => {
  let valid = true;
  for (const [name, rule] of Object.entries(rules)) {
    const message = rule(form.elements[name].value);
    const box = document.getElementById(`${name}-error`);
    box.textContent = message;
    box.hidden = !message;
    if (message) valid = false;
  }
  if (!valid) event.preventDefault();
});
