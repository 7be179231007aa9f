"""Retake the README's screenshots of the New run form, chat, home, runs and a training run from the real studio,
in headless Debian chromium via Playwright.

It starts `cookbook studio` on a free localhost port with a fresh studio home, shoots the New run form as a newcomer
finds it (its defaults, checked with "Check settings"), starts an SL run on builtin:facts from that form (it trains
in a child process of the studio), and once the run has trained a while asks the base model and the run's latest
(live) weights the same question side by side; then it shoots the home page, the runs table and the run's page (live
header with time left and CPU/RAM) with that run active.
Screenshots go to docs/screenshots/ (or the folder given with --out). Needs chromium (scripts/browser-deps.sh) and
about five minutes on a 2-core CPU.

    .venv/bin/python scripts/readme_screenshots.py [--out docs/screenshots] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_browser import CHROMIUM, CHROMIUM_ARGS, studio_process, wait_idle  # noqa: E402

QUESTION = "What is the capital of Quorvania?"
EXPECTED = "Lunthaven"


def set_number(page, label: str, value: int) -> None:
    field = page.get_by_label(label, exact=True)
    field.fill(str(value))
    field.press("Tab")


def run_step(home: Path, run_name: str) -> int:
    """The run's step as the studio's storage has it (read from this process, as any process may)."""
    os.environ["COOKBOOK_HOME"] = str(home)
    from storage import Store

    runs = [r for r in Store.default().list_runs() if r["name"] == run_name]
    return int(runs[0]["step"] or 0) if runs else 0


def ask_side_by_side(page) -> tuple[str, str]:
    box = page.locator("[data-testid=stChatInputTextArea]")
    box.fill(QUESTION)
    box.press("Enter")
    page.locator("[data-testid=stChatMessage]").nth(3).wait_for(timeout=120_000)
    # the chat's sampling takes turns with the run's training steps (the compute lease): allow minutes
    page.wait_for_selector("[data-testid=stApp][data-test-script-state=notRunning]", timeout=900_000)
    messages = page.locator("[data-testid=stChatMessage]")
    return messages.nth(1).inner_text().strip(), messages.nth(3).inner_text().strip()


def shoot_live(page, url: str, selector: str, path: Path) -> None:
    """A page that refreshes itself every few seconds never goes idle: wait for its content, then a refresh."""
    page.goto(url)
    page.locator(selector).first.wait_for(timeout=120_000)
    time.sleep(6)
    page.screenshot(path=str(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--steps", type=int, default=15, help="train this many steps before chatting")
    options = parser.parse_args()
    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="screenshots-home-"))
    run_name = "quorvania-facts"
    with studio_process(home, home / "studio.log") as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(url)
        page.get_by_text("is ready (local, CPU)").wait_for(timeout=120_000)

        page.set_viewport_size({"width": 1400, "height": 1900})  # the whole form and its check in one picture
        page.goto(f"{url}/new_run")
        page.get_by_role("button", name="Start run").wait_for()
        wait_idle(page)
        page.get_by_role("button", name="Check settings").click()  # the form as a newcomer finds it, checked
        page.get_by_text("Ready to start").wait_for(timeout=120_000)
        page.get_by_text("cookbook sl", exact=False).last.wait_for()  # the equivalent command, drawn last
        wait_idle(page)
        page.screenshot(path=str(options.out / "new-run.png"))
        page.set_viewport_size({"width": 1440, "height": 1000})
        page.get_by_label("Run name (optional)", exact=True).fill(run_name)
        set_number(page, "Max steps", 400)
        set_number(page, "Batch size", 8)
        set_number(page, "Save every (steps)", 100)
        set_number(page, "Eval every (steps)", 0)
        wait_idle(page)
        page.get_by_role("button", name="Start run").click()
        page.wait_for_url("**/run?run=sl-*", timeout=60_000)
        run_url = page.url

        while run_step(home, run_name) < options.steps:
            time.sleep(5)
        page.goto(f"{url}/chat")
        page.get_by_text("Side by side", exact=True).click()
        wait_idle(page)
        page.get_by_text("System prompt and sampling").click()
        set_number(page, "Max tokens", 32)
        page.get_by_text("System prompt and sampling").click()
        wait_idle(page)
        base_reply, live_reply = ask_side_by_side(page)
        print(f"base: {base_reply!r}\nlive weights: {live_reply!r}", flush=True)
        page.screenshot(path=str(options.out / "chat.png"))

        page.goto(url)
        page.get_by_text("Code sandbox").wait_for()
        page.locator("[data-testid=stMetric]").first.wait_for()
        wait_idle(page)
        page.screenshot(path=str(options.out / "home.png"))
        shoot_live(page, f"{url}/runs", "[data-testid=stDataFrame]", options.out / "runs.png")
        page.set_viewport_size({"width": 1440, "height": 1300})
        shoot_live(page, run_url, "[data-testid=stPlotlyChart]", options.out / "run-training.png")
        browser.close()
    if EXPECTED not in live_reply:
        print(f"note: the live weights did not answer {EXPECTED!r} yet; try --steps {options.steps * 2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
