const count = document.getElementById("cart-count");
const added = document.querySelector(".added");
document.getElementById("buy").addEventListener("submit", (event) => {
  event.preventDefault();
  const qty = Math.min(10, Math.max(1, Number(document.getElementById("qty").value) || 1));
  count.textContent = String(Number(count.textContent) + qty);
  added.hidden = false;
});
