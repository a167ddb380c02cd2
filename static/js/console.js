// Reckon console behaviour that htmx attributes cannot express (no inline scripts: strict CSP).
"use strict";

// A self-refreshing table must not pull the rug from under someone at work: skip a refresh
// while a row checkbox inside it is checked, or while any form field has the focus.
function consoleIsBusy(region) {
  if (region.querySelector("input[type=checkbox]:checked")) return true;
  const active = document.activeElement;
  return Boolean(active && active.matches("input, select, textarea") && active.type !== "checkbox");
}

document.addEventListener("htmx:confirm", function (event) {
  const region = event.detail.elt;
  if (region.hasAttribute("data-autorefresh") && consoleIsBusy(region)) {
    event.preventDefault();
  }
});
