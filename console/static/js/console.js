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

// A pending "are you sure?" step is work in progress too: the table must not refresh it away.
document.addEventListener("htmx:confirm", function (event) {
  const region = event.detail.elt;
  if (region.hasAttribute("data-autorefresh") && region.querySelector("[data-confirm]")) {
    event.preventDefault();
  }
});

// Keyboard shortcuts, listed on each page under "Keyboard shortcuts" (opened with "?"). A key acts
// on the element that carries it as data-shortcut, as a click would: a link is followed, a decision
// button submits its form (the browser's own check of the required note still applies).
function typingIn(target) {
  return target && target.matches && target.matches("input:not([type=checkbox]), select, textarea, [contenteditable]");
}

function shortcutScope() {
  // On the job page only the decision panel's keys count (the queue tabs loaded there have keys too).
  return document.getElementById("decision-panel") || document;
}

function queueRows() {
  return Array.from(document.querySelectorAll("#queue-table tbody tr[data-job]"));
}

function moveInQueue(step) {
  const rows = queueRows();
  if (!rows.length) return;
  const current = rows.findIndex(function (row) { return row.contains(document.activeElement); });
  const next = rows[Math.min(Math.max(current + step, 0), rows.length - 1)];
  next.querySelector("th a").focus();
}

document.addEventListener("keydown", function (event) {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (typingIn(target)) {
    if (event.key === "Escape" && target.matches("textarea")) target.blur();  // so that a key decides next
    return;
  }
  const key = event.key;
  if (key === "?") {
    const help = document.getElementById("shortcuts");
    if (help) {
      help.open = !help.open;
      help.querySelector("summary").focus();
    }
    event.preventDefault();
    return;
  }
  const focusable = shortcutScope().querySelector('[data-shortcut-focus="' + CSS.escape(key) + '"]');
  if (focusable) {
    focusable.focus();
    event.preventDefault();
    return;
  }
  if (document.getElementById("queue-table") && !document.getElementById("decision-panel")) {
    if (key === "j" || key === "k") {
      moveInQueue(key === "j" ? 1 : -1);
      event.preventDefault();
      return;
    }
    const row = queueRows().find(function (r) { return r.contains(document.activeElement); });
    if (row && key === "o") {
      row.querySelector("th a").click();
      return;
    }
    if (row && key === "x") {
      const box = row.querySelector("input[type=checkbox]");
      if (box) box.click();
      return;
    }
  }
  if (key === "u" && document.getElementById("decision-panel")) {
    // The queue list this job was opened from, its filter kept (the page's "Back to the queue").
    const queue = document.querySelector("[data-back-to-queue]") || document.querySelector('header nav a[href$="/queue/"]');
    if (queue) queue.click();
    return;
  }
  const element = shortcutScope().querySelector('[data-shortcut="' + CSS.escape(key) + '"]');
  if (element) {
    event.preventDefault();
    element.click();  // a button's click submits its form as a person's would, checks included
  }
});
