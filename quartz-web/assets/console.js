// The quartz console's script: a live cron preview on the job form (passing
// over the times the form's calendar excludes), the schedule fields shown
// for the kind chosen, and pages that refresh themselves (the overview,
// jobs, a job, history, nodes, changes: their content is fetched again every
// five seconds and put in place, with no reload). It writes text, or nodes
// of this server's own pages, never HTML it builds; the pages work without it.
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

  // A page that refreshes itself: every five seconds while shown and not
  // paused, its content is fetched again and put in place, unless the
  // reader is typing in it or has text selected.
  function live() {
    const main = document.querySelector("main");
    if (!document.body.dataset.live || !main) return;
    if (main.querySelector("form.job-form, form.confirm, textarea, .conflict")) return;
    let on = window.localStorage.getItem("quartz-live") !== "off";
    let busy = false;
    // A click under way is never lost to a refresh.
    let pressed = 0;
    main.addEventListener("pointerdown", function () {
      pressed = Date.now();
    });
    const box = document.createElement("span");
    box.className = "live";
    box.id = "live";
    const state = document.createElement("span");
    const toggle = document.createElement("button");
    toggle.type = "button";
    box.append(state, toggle);
    const who = document.querySelector("header.top .who");
    if (who) who.prepend(box);
    function show(text) {
      state.textContent = text;
      toggle.textContent = on ? "Pause" : "Live";
      box.classList.toggle("off", !on);
    }
    async function refresh() {
      if (!on || busy || document.hidden) return;
      const active = document.activeElement;
      if (active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) return;
      if (String(window.getSelection() || "") !== "") return;
      if (Date.now() - pressed < 1500) return;
      busy = true;
      try {
        const answer = await fetch(window.location.href, { credentials: "same-origin" });
        if (answer.redirected && new URL(answer.url).pathname.endsWith("/login")) {
          on = false;
          show("session ended: reload to log in");
          return;
        }
        if (!answer.ok) {
          show("refresh failed (" + answer.status + ")");
          return;
        }
        const page = new DOMParser().parseFromString(await answer.text(), "text/html");
        const fresh = page.querySelector("main");
        if (!fresh) return;
        main.replaceChildren(...Array.from(fresh.childNodes, (node) => document.importNode(node, true)));
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || "0") + 1);
        show("updated " + new Date().toLocaleTimeString());
      } catch (e) {
        show("refresh failed");
      } finally {
        busy = false;
      }
    }
    toggle.addEventListener("click", function () {
      on = !on;
      window.localStorage.setItem("quartz-live", on ? "on" : "off");
      show(on ? "live" : "paused");
      if (on) refresh();
    });
    show(on ? "live" : "paused");
    window.setInterval(refresh, Number(document.body.dataset.live) * 1000);
    document.addEventListener("visibilitychange", refresh);
  }

  document.addEventListener("DOMContentLoaded", function () {
    live();
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
