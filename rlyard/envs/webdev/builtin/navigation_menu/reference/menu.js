const toggle = document.querySelector(".toggle");
const menu = document.getElementById(toggle.getAttribute("aria-controls"));
toggle.addEventListener("click", () => {
  const open = menu.classList.toggle("open");
  toggle.setAttribute("aria-expanded", String(open));
});
