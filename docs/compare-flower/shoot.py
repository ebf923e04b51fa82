"""Photographs a task list (1400x900) and one task's page (1400 wide, the whole
page) in Flower (``shoot.py flower``, on 127.0.0.1:5566) or in our admin
(``shoot.py ours``, on 127.0.0.1:8765, as demo/demo), into the folder given
second, as compare-<which>-tasks.png and compare-<which>-task.png. The task
page is the task whose retries ran out (fetch_rates("GBP")). Each PNG is then
reduced to 256 colours with Pillow, which keeps the text sharp at a third of
the size.

Needs Playwright for Python and Debian's chromium (CHROMIUM=/path for another);
Playwright's own browser download is not used."""

import os
import sys
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def flower(page: Page) -> str:
    site = "http://127.0.0.1:5566"
    page.goto(f"{site}/tasks")
    page.wait_for_selector("#tasks-table tbody tr td a")
    page.wait_for_timeout(1000)
    rows = page.locator("#tasks-table tbody tr", has_text="fetch_rates")
    link = rows.filter(has_text="FAILURE").locator("a[href^='/task/']").first
    return site + str(link.get_attribute("href"))


def ours(page: Page) -> str:
    site = "http://127.0.0.1:8765"
    page.goto(f"{site}/admin/login/?next=/admin/django_bgtasks/queuedtask/")
    page.fill("#id_username", "demo")
    page.fill("#id_password", "demo")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    page.wait_for_timeout(1000)
    rows = page.locator("#result_list tbody tr", has_text="fetch_rates")
    link = rows.filter(has_text="failed").locator("th a").first
    return site + str(link.get_attribute("href"))


def main() -> None:
    which, folder = sys.argv[1], Path(sys.argv[2])
    tasks, task = folder / f"compare-{which}-tasks.png", folder / f"compare-{which}-task.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        url = {"flower": flower, "ours": ours}[which](page)
        page.screenshot(path=str(tasks))
        page.goto(url)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(task), full_page=True)
        browser.close()
    for path in (tasks, task):
        image = Image.open(path).convert("RGB")
        image.quantize(256, Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            path, optimize=True
        )


if __name__ == "__main__":
    main()
