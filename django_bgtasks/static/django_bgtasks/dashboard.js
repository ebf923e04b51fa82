/*
 * django-bgtasks: keeps the admin's dashboard current without a reload.
 *
 * Every data-bgtasks-refresh seconds it reads the page again (the same URL,
 * so the same window and scope) and puts the new #bgtasks-dashboard in place
 * of the old one: the charts are drawn on the server (admin/charts.py), so
 * there is nothing to draw here. data-bgtasks-refreshes counts the
 * refreshes done, and data-bgtasks-live says how the last one went ("live",
 * or the HTTP status or "offline" when it failed; it tries again at the
 * next interval). No build step: plain ES2017.
 */
"use strict";
(function () {
  function start() {
    const box = document.getElementById("bgtasks-dashboard");
    if (!box) return;
    const every = Math.max(parseFloat(box.dataset.bgtasksRefresh) || 10, 1) * 1000;
    let refreshes = 0;

    async function refresh() {
      const current = document.getElementById("bgtasks-dashboard");
      try {
        const response = await fetch(window.location.href, {
          credentials: "same-origin",
          cache: "no-store",
        });
        if (!response.ok) {
          current.dataset.bgtasksLive = String(response.status);
        } else {
          const page = new DOMParser().parseFromString(await response.text(), "text/html");
          const fresh = page.getElementById("bgtasks-dashboard");
          if (fresh) {
            refreshes += 1;
            fresh.dataset.bgtasksRefreshes = String(refreshes);
            fresh.dataset.bgtasksLive = "live";
            current.replaceWith(document.importNode(fresh, true));
          }
        }
      } catch (error) {
        current.dataset.bgtasksLive = "offline";
      }
      window.setTimeout(refresh, every);
    }
    window.setTimeout(refresh, every);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
