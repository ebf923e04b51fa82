"""Every admin page fits the window, in Chromium, filled as a production
site fills it (tests/browser/realistic.py): at 1280, 1400 and 1920 px, with
the admin's sidebar open and closed.

Each page is measured (:data:`MEASURE`) once live.js has written its cells:
nothing scrolls sideways (the page, a table's container, a ``<pre>``); no
element reaches past the cell it is in; and no word is broken over two
lines. A word may wrap only where text does, after a hyphen (a task name
"sync-customer-/invoices"), and where the page lets it: an id between its
parts (the ``<wbr>`` after each ``.``, ``:``, ``_`` or ``/``). A UUID is
one word. The Workers table fills the width its caption spans.

Layout is the browser's, not the database's: this runs on SQLite only.
Set ``BGTASKS_SCREENSHOTS=docs`` to save each page at 1400 px, sidebar
open, as ``docs/admin-<page>.png``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.browser import realistic

ADMIN = "/admin/django_bgtasks/"
WIDTHS = (1280, 1400, 1920)
SCREENSHOT_WIDTH = 1400

# Problems on the page, as sentences; [] when it fits.
MEASURE = """() => {
  const problems = [];
  const describe = (el) => {
    let text = el.tagName.toLowerCase();
    if (el.id) text += "#" + el.id;
    if (typeof el.className === "string" && el.className.trim()) {
      text += "." + el.className.trim().split(/\\s+/).join(".");
    }
    return text;
  };
  const where = (el) => {
    const parts = [];
    for (let e = el; e && e.id !== "content" && parts.length < 4; e = e.parentElement) {
      parts.unshift(describe(e));
    }
    return parts.join(" > ");
  };
  const content = document.getElementById("content");
  // Clipped away, it is for screen readers only (Django 6's .visually-hidden
  // headings): nothing of it is on the screen to fit.
  const clipped = (el) => {
    for (let e = el; e && e !== content; e = e.parentElement) {
      if (getComputedStyle(e).clip.startsWith("rect(")) return true;
    }
    return false;
  };
  const visible = (el) => el.getClientRects().length > 0 && !clipped(el);
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth) {
    problems.push(`the page scrolls sideways: ${page.scrollWidth} px in ${page.clientWidth} px`);
  }
  for (const el of content.querySelectorAll("*")) {
    if (!visible(el)) continue;
    const style = getComputedStyle(el);
    if (style.overflowX !== "visible" && el.scrollWidth > el.clientWidth + 1) {
      problems.push(`${where(el)} scrolls sideways: ${el.scrollWidth} px in ${el.clientWidth} px`);
    }
    if (el.getBoundingClientRect().right > page.clientWidth + 1) {
      problems.push(`${where(el)} reaches past the window's edge`);
    }
  }
  for (const cell of content.querySelectorAll("td, th")) {
    if (!visible(cell)) continue;
    const edge = cell.getBoundingClientRect().right + 1;
    for (const el of cell.querySelectorAll("*")) {
      if (visible(el) && el.getBoundingClientRect().right > edge) {
        problems.push(`${where(el)} reaches past its cell`);
      }
    }
  }
  const WORDS = /[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|[^\\s-]+-*|-+/gi;
  const skip = new Set(["SCRIPT", "STYLE", "OPTION", "TEXTAREA", "TEMPLATE"]);
  const walker = document.createTreeWalker(content, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (skip.has(node.parentElement.tagName) || !visible(node.parentElement)) continue;
    // Words, and the parts of a hyphenated one (it may wrap after a
    // hyphen, as text does), but a UUID is one word.
    for (const word of node.data.matchAll(WORDS)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0);
      const lines = new Set(rects.map((r) => Math.round(r.bottom))).size;
      if (lines > 1) {
        problems.push(`"${word[0]}" is broken over ${lines} lines: ${where(node.parentElement)}`);
      }
    }
  }
  for (const module of content.querySelectorAll(".module")) {
    const caption = module.querySelector(":scope > h2");
    const table = module.querySelector(":scope > table");
    if (!caption || !table || !visible(table)) continue;
    const [a, b] = [caption.getBoundingClientRect(), table.getBoundingClientRect()];
    if (Math.abs(a.left - b.left) > 1 || Math.abs(a.right - b.right) > 1) {
      const widths = `${Math.round(b.width)} px under a caption of ${Math.round(a.width)} px`;
      problems.push(`${where(table)} is ${widths}`);
    }
  }
  return problems;
}"""


def pages(filled: realistic.Filled) -> dict[str, tuple[str, str]]:
    """Each page by the name of its screenshot: (its path, an element it must show)."""
    tasks = ADMIN + "backgroundtask/"
    queued = ADMIN + "queuedtask/"
    return {
        "tasks": (tasks, ".bgtasks-workers table"),
        "task": (f"{tasks}{realistic.HISTORY_TASK}/change/", ".bgtasks-history"),
        "task-failed": (f"{tasks}{realistic.FAILED_TASK}/change/", ".bgtasks-error"),
        "task-never-run": (f"{tasks}{realistic.NEVER_RUN_TASK}/change/", ".field-about"),
        "task-log": (f"{tasks}{realistic.HISTORY_TASK}/history/", "#change-history"),
        "release": (f"{tasks}{realistic.STALE_TASK}/release/", ".bgtasks-release"),
        "django-tasks": (queued, "#result_list"),
        # Failed: why each failed, in red; searched by error text; a bulk
        # action's confirmation (issue 51).
        "django-tasks-failed": (f"{queued}?status__exact=FAILED", ".bgtasks-error-line"),
        "django-tasks-search": (f"{queued}?q=error%3Aserialize+since%3A1d", "#result_list"),
        "django-tasks-bulk": (f"{queued}bulk/retry/?status__exact=FAILED", ".bgtasks-bulk-count"),
        "dashboard": (f"{queued}dashboard/", ".bgtasks-chart"),
        "django-task-failed": (
            f"{queued}{filled.failed_django_task.uuid}/change/",
            ".field-errors_list",
        ),
        "django-task-running": (
            f"{queued}{filled.running_django_task.uuid}/change/",
            ".field-worker",
        ),
    }


@pytest.fixture
def test_app_tasks_only() -> None:
    """Only the test app's tasks are registered while the pages are measured.
    Test modules register theirs when they are imported (tests/admin/test_views.py's
    name made of HTML, say), and which ones a process has imported depends on
    what else it collected: the pages must show this test's data alone.
    (conftest's fresh_registry puts the others back afterwards.)"""
    from django_bgtasks.background import registry

    with registry._lock:
        for name, task in list(registry._tasks.items()):
            if task.func.__module__ != "tests.testapp.tasks":
                del registry._tasks[name]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("test_app_tasks_only")
def test_every_admin_page_fits_with_the_sidebar_open_and_closed(
    live_server: Any, make_staff: Any, page: Any
) -> None:
    user = make_staff("root", superuser=True)
    filled = realistic.fill("default", user)
    page.goto(live_server.url + "/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    folder = os.environ.get("BGTASKS_SCREENSHOTS")

    problems: list[str] = []
    for name, (path, shown) in pages(filled).items():
        # Loaded once, with the sidebar open; the polls go quiet once live.js
        # has written the cells. Then the window is resized, and the sidebar
        # closed, in place.
        page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
        page.goto(live_server.url + path, wait_until="networkidle")
        assert page.locator(shown).first.is_visible(), (name, shown)
        # What folds away is measured unfolded ("Run now with arguments…").
        page.evaluate("document.querySelectorAll('#content details').forEach(d => d.open = true)")
        for sidebar in (True, False):
            if not sidebar:
                page.click("#toggle-nav-sidebar")
            assert page.locator("#nav-sidebar").is_visible() is sidebar, name
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                where = f"{name} at {width} px, sidebar {'open' if sidebar else 'closed'}"
                problems += [f"{where}: {problem}" for problem in page.evaluate(MEASURE)]
                if folder and sidebar and width == SCREENSHOT_WIDTH:
                    shot = Path(folder) / f"admin-{name}.png"
                    page.screenshot(path=str(shot), full_page=True)
    assert problems == [], "\n".join(problems)
