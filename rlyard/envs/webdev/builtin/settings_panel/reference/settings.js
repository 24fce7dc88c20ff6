const settings = document.getElementById("settings");
settings.addEventListener("submit", (event) => {
  event.preventDefault();
  settings.querySelector("[role=status]").hidden = false;
});
