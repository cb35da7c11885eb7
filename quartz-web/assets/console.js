// The quartz console's script: a live cron preview on the job form (passing
// over the times the form's calendar excludes), and the
// schedule fields shown for the kind chosen. It writes text only (never
// HTML), and the pages work without it.
"use strict";

(function () {
  const base = document.body.dataset.base || "";

  function showKindFields() {
    const kind = document.getElementById("kind");
    if (!kind) return;
    for (const el of document.querySelectorAll("[data-kinds]")) {
      el.hidden = !el.dataset.kinds.split(" ").includes(kind.value);
    }
  }

  let timer = null;
  let asked = 0;

  async function preview() {
    const cron = document.getElementById("cron");
    const zone = document.getElementById("time_zone");
    const list = document.getElementById("cron-preview");
    const error = document.getElementById("cron-preview-error");
    if (!cron || !list || !error) return;
    const ask = ++asked;
    const params = new URLSearchParams({ cron: cron.value.trim(), time_zone: zone.value.trim() || "UTC", count: "5" });
    for (const id of ["dst_skipped", "dst_repeated"]) {
      const choice = document.getElementById(id);
      if (choice) params.set(id, choice.value);
    }
    // The times the trigger's calendar excludes are not fire times.
    const calendar = document.getElementById("calendar");
    if (calendar && calendar.value.trim()) params.set("calendar", calendar.value.trim());
    try {
      const answer = await fetch(base + "/api/v1/cron/preview?" + params, { credentials: "same-origin" });
      const body = await answer.json();
      if (ask !== asked) return;
      list.replaceChildren();
      error.textContent = "";
      if (answer.ok) {
        for (const at of body.fire_times_utc) {
          const item = document.createElement("li");
          item.textContent = at;
          list.appendChild(item);
        }
        if (body.note) error.textContent = body.note;
        else if (body.fire_times_utc.length === 0) error.textContent = "This expression never fires again.";
      } else {
        error.textContent = body.error ? body.error.message : "The preview failed.";
      }
    } catch (e) {
      if (ask === asked) error.textContent = "The preview failed: " + e;
    }
  }

  function schedulePreview() {
    clearTimeout(timer);
    timer = setTimeout(preview, 200);
  }

  document.addEventListener("DOMContentLoaded", function () {
    const kind = document.getElementById("kind");
    if (kind) {
      kind.addEventListener("change", showKindFields);
      showKindFields();
    }
    for (const id of ["cron", "time_zone", "dst_skipped", "dst_repeated", "calendar"]) {
      const input = document.getElementById(id);
      if (input) input.addEventListener(input.tagName === "SELECT" ? "change" : "input", schedulePreview);
    }
  });
})();
