/*
 * django-bgtasks: keeps the admin's task cells current without a reload.
 *
 * It listens to the admin's event stream (data-bgtasks-events, Server-Sent
 * Events under an ASGI server): every task's state, then each change, pushed.
 * The page names the stream only where it is served (the page came through
 * ASGI, or BGTASKS_ADMIN_EVENTS says so), so that under WSGI no request is
 * answered 501. Without it, or when the stream fails (a proxy refuses it),
 * it asks the admin's status URL (the JSON API's
 * task list) every second, with If-None-Match, so a poll that finds nothing
 * changed costs a 304 and no body. Either way it rewrites the cells marked
 * data-bgtasks-task + data-bgtasks-field, and #bgtasks-live's
 * data-bgtasks-mode says which it uses ("events" or "polling").
 * Between changes it ages the heartbeats itself: the server leaves
 * heartbeat_age out of the ETag, because it grows with the clock, and the
 * stream sends the ages only with its keepalive. The cells
 * of a task that never ran (no state yet) stay as the page has them until
 * it runs.
 *
 * The words it writes follow django_bgtasks/operations/display.py; change both together.
 * The state names it compares with are the page's (see STATUS below).
 * No build step: plain ES2017, loaded by BackgroundTaskAdmin.Media.
 */
"use strict";
(function () {
  // The state names, spelled once in django_bgtasks/choices.py (Status): the
  // page hands them over as JSON (json_script "bgtasks-states"), read once by
  // init(). STATUS is each status's value by its Python name (STATUS.STALE);
  // SLUGS is each status's CSS class suffix, by value (Status.slug).
  let STATUS = {};
  let SLUGS = {};

  function formatSeconds(value) {
    if (value === null || value === undefined) return "";
    value = Math.max(value, 0);
    if (value < 10) return value.toFixed(1) + " s";
    if (value < 60) return Math.floor(value) + " s";
    const whole = Math.floor(value);
    const minutes = Math.floor(whole / 60);
    if (minutes < 60) return minutes + " min " + (whole % 60) + " s";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
  }

  function statusText(state, age) {
    if (state.status === STATUS.STALE) {
      return STATUS.STALE + ": holder silent for " + formatSeconds(age);
    }
    return state.status;
  }

  function progressLabel(state) {
    if (state.progress === null) return "";
    let label = Math.floor(state.progress * 100) + "%";
    const value = state.value;
    if (value && typeof value === "object" && "done" in value && "total" in value) {
      label += " (" + String(value.done) + "/" + String(value.total) + ")";
    }
    return label;
  }

  function durationOf(state, age) {
    if (!state.started_at) return null;
    const started = Date.parse(state.started_at);
    if (state.finished_at) return (Date.parse(state.finished_at) - started) / 1000;
    if (!state.updated_at || age === null) return null;
    return (Date.parse(state.updated_at) - started) / 1000 + age;
  }

  // Times as the server writes them: Django's DATETIME_FORMAT in the site's
  // time zone (dates.js, with the page's json_script "bgtasks-dates").
  let DATES = null;

  function formatTime(iso) {
    return window.bgtasksDates.format(iso, DATES);
  }

  function sortedKeys(value) {
    // As Python's json.dumps(sort_keys=True) writes it on the server.
    if (Array.isArray(value)) return value.map(sortedKeys);
    if (value && typeof value === "object") {
      const sorted = {};
      for (const key of Object.keys(value).sort()) sorted[key] = sortedKeys(value[key]);
      return sorted;
    }
    return value;
  }

  function setTime(cell, iso) {
    if (!iso) {
      cell.textContent = "";
      return;
    }
    let time = cell.querySelector("time");
    if (!time) {
      time = document.createElement("time");
      cell.replaceChildren(time);
    }
    time.dateTime = iso;
    time.textContent = formatTime(iso);
  }

  // An id as the server writes it (admin/formats.py's id_html): it may break
  // after each separator (. : _ /), never inside a part.
  function setId(cell, text) {
    text = text || "";
    if (cell.textContent === text) return;
    const id = document.createElement("span");
    id.className = "bgtasks-id";
    text.match(/[^.:_/]*[.:_/]?/g).filter(Boolean).forEach((part, index) => {
      if (index) id.appendChild(document.createElement("wbr"));
      id.appendChild(document.createTextNode(part));
    });
    cell.replaceChildren(id);
  }

  function setClass(cell, prefix, slug) {
    for (const name of Array.from(cell.classList)) {
      if (name.startsWith(prefix)) cell.classList.remove(name);
    }
    if (slug) cell.classList.add(prefix + slug);
  }

  const RENDER = {
    status(cell, state, age) {
      cell.textContent = statusText(state, age);
      setClass(cell, "bgtasks-status-", SLUGS[state.status]);
    },
    progress(cell, state) {
      const bar = cell.querySelector("progress");
      const label = cell.querySelector(".bgtasks-label");
      if (bar) {
        if (state.progress !== null) {
          bar.value = state.progress;
          bar.hidden = false;
        } else if (state.running) {
          bar.removeAttribute("value"); // indeterminate: running, no progress reported
          bar.hidden = false;
        } else {
          bar.hidden = true;
        }
      }
      if (label) label.textContent = progressLabel(state);
    },
    owner(cell, state) {
      setId(cell, state.owner);
    },
    token(cell, state) {
      cell.textContent = String(state.token);
    },
    outcome(cell, state) {
      cell.textContent = state.outcome;
      setClass(cell, "bgtasks-outcome-", state.outcome);
    },
    heartbeat(cell, state, age) {
      cell.textContent = age === null ? "" : formatSeconds(age) + " ago";
    },
    started(cell, state) {
      setTime(cell, state.started_at);
    },
    finished(cell, state) {
      setTime(cell, state.finished_at);
    },
    duration(cell, state, age) {
      cell.textContent = formatSeconds(durationOf(state, age));
      // The finish, on hover (the changelist shows the start and the duration).
      cell.title = state.finished_at ? "finished " + formatTime(state.finished_at) : "";
    },
    value(cell, state) {
      cell.textContent = JSON.stringify(sortedKeys(state.value), null, 2);
    },
  };

  function start(root) {
    const url = root.dataset.bgtasksPoll;
    const interval = Number(root.dataset.bgtasksInterval) || 1000;
    const problem = root.querySelector("[data-bgtasks-problem]");
    const notice = root.querySelector("[data-bgtasks-notice]");
    // The changelist's rows are fixed when the page is made; tasks that get a
    // row later (started on another replica) are named, for a reload to add.
    const knownScript = document.getElementById("bgtasks-known");
    const known = knownScript ? new Set(JSON.parse(knownScript.textContent)) : null;
    // Cells and buttons by task name; the set of rows is fixed until a reload.
    const cells = new Map();
    for (const element of document.querySelectorAll("[data-bgtasks-task]")) {
      const name = element.dataset.bgtasksTask;
      if (!cells.has(name)) cells.set(name, []);
      cells.get(name).push(element);
    }
    let etag = null;
    let states = new Map();
    const receivedAt = new Map(); // performance.now() when each state arrived
    let timer = null;
    let stopped = false;

    function say(message) {
      if (!problem) return;
      problem.textContent = message;
      problem.hidden = !message;
    }

    function announceNew() {
      if (!known || !notice) return;
      const fresh = Array.from(states.keys()).filter((name) => !known.has(name));
      notice.textContent = fresh.length
        ? "Started since this page loaded: " + fresh.join(", ") + ". Reload to see them."
        : "";
      notice.hidden = !fresh.length;
    }

    function render() {
      for (const [name, elements] of cells) {
        const state = states.get(name);
        if (!state) continue;
        const elapsed = (performance.now() - (receivedAt.get(name) || 0)) / 1000;
        const age = state.heartbeat_age === null ? null : state.heartbeat_age + elapsed;
        const held = state.running || state.stale;
        for (const element of elements) {
          const field = element.dataset.bgtasksField;
          if (field && RENDER[field]) RENDER[field](element, state, age);
          // A cancel button names the run it cancels: the one on screen now.
          if (element.name === "token" && state.token !== null) element.value = state.token;
          // Which buttons fit: run now when not held; run now as a takeover
          // when the holder is silent; cancel while running; release while held.
          const show = element.dataset.bgtasksShow;
          if (show === STATUS.IDLE) element.hidden = held;
          else if (show === STATUS.STALE) element.hidden = !state.stale;
          else if (show === STATUS.RUNNING) element.hidden = !state.running;
          else if (show === "held") element.hidden = !held;
        }
      }
    }

    async function poll() {
      timer = null;
      if (stopped || document.hidden) return; // resumed by visibilitychange
      try {
        const headers = { "Accept": "application/json" };
        if (etag) headers["If-None-Match"] = etag;
        // no-store: the browser neither adds nor answers conditions itself, so
        // this script sees the 304 and keeps what it has.
        const response = await fetch(url, { headers, credentials: "same-origin", cache: "no-store" });
        const type = response.headers.get("Content-Type") || "";
        if (response.status === 304) {
          say("");
        } else if (response.ok && type.startsWith("application/json")) {
          const data = await response.json();
          etag = response.headers.get("ETag");
          states = new Map(data.tasks.map((state) => [state.name, state]));
          const now = performance.now();
          for (const name of states.keys()) receivedAt.set(name, now);
          say("");
          announceNew();
        } else if (response.status === 403 || response.redirected || response.ok) {
          // Logged out (the admin redirects to its login page) or no longer allowed.
          ended();
          return;
        } else {
          say("Live updates paused: the server answered " + response.status + ". Retrying.");
        }
      } catch (error) {
        say("Live updates paused: the server can't be reached. Retrying.");
      }
      render();
      timer = setTimeout(poll, interval);
    }

    function ended() {
      stopped = true;
      say("Live updates stopped: your session has ended or lost its permission. Reload the page.");
    }

    // The stream: the browser reconnects by itself (sending Last-Event-ID);
    // a refusal at open (a 403, a proxy's error) closes it, and polling takes over.
    function listen(eventsUrl) {
      const source = new EventSource(eventsUrl, { withCredentials: true });
      let opened = false;
      root.dataset.bgtasksMode = "events";
      source.addEventListener("open", () => {
        opened = true;
        say("");
      });
      source.addEventListener("state", (event) => {
        const state = JSON.parse(event.data);
        states.set(state.name, state);
        receivedAt.set(state.name, performance.now());
        announceNew();
        render();
      });
      source.addEventListener("removed", (event) => {
        states.delete(JSON.parse(event.data).name);
        announceNew();
      });
      source.addEventListener("heartbeats", (event) => {
        const now = performance.now();
        for (const [name, age] of Object.entries(JSON.parse(event.data))) {
          const state = states.get(name);
          if (!state) continue;
          state.heartbeat_age = age;
          receivedAt.set(name, now);
        }
        render();
      });
      source.addEventListener("end", () => {
        source.close();
        ended();
      });
      source.addEventListener("error", () => {
        if (source.readyState === EventSource.CLOSED) {
          source.close();
          if (!stopped) {
            root.dataset.bgtasksMode = "polling";
            poll(); // a 403 there says why, and stops
          }
        } else if (opened) {
          say("Live updates paused: the server can't be reached. Reconnecting.");
        }
      });
      setInterval(render, 1000); // ages the heartbeats between events
    }

    document.addEventListener("visibilitychange", () => {
      if (root.dataset.bgtasksMode === "polling" && !document.hidden && timer === null && !stopped) poll();
    });
    const eventsUrl = root.dataset.bgtasksEvents;
    if (eventsUrl && window.EventSource) {
      listen(eventsUrl);
    } else {
      root.dataset.bgtasksMode = "polling";
      poll();
    }
  }

  function init() {
    const root = document.getElementById("bgtasks-live");
    const names = document.getElementById("bgtasks-states");
    const dates = document.getElementById("bgtasks-dates");
    if (!root || !root.dataset.bgtasksPoll || !names || !dates || !window.fetch) return;
    if (!window.bgtasksDates) return;
    ({ statuses: STATUS, slugs: SLUGS } = JSON.parse(names.textContent));
    DATES = JSON.parse(dates.textContent);
    start(root);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
