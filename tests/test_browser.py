"""End to end in a real browser: the studio as a user runs it (`cookbook studio` on a free localhost port, its own
COOKBOOK_HOME), driven by Playwright through Debian's headless chromium (no browser download; scripts/browser-deps.sh
installs chromium). A short SL run is submitted from the New run form, followed to completion with its chart
drawn, and the chat answers a message from the real default model. Screenshots land in test-artifacts/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the studio exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the studio did not answer on {url} within {timeout_s} s")


@contextmanager
def studio_process(home: Path, log_path: Path, **env_extra: str):
    """`cookbook studio` as a user starts it (no --address), on a free localhost port with its own home; yields
    (url, process) once it answers, and stops it afterwards."""
    port = free_port()
    env = {**os.environ, "COOKBOOK_HOME": str(home), **env_extra}
    env.pop("TINKER_API_KEY", None)
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "cookbook_engine.cli", "studio", "--port", str(port)],
                                   cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, process)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def studio(tmp_path, default_model_ready):
    """The studio started the way `cookbook studio` starts it, on a free port, with a fresh home."""
    try:
        with studio_process(tmp_path / "home", tmp_path / "studio.log", OMP_NUM_THREADS="1") as (url, _):
            yield url
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "studio.log", ARTIFACTS / "browser-studio.log")


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 1400, "height": 1800})
        tab.set_default_timeout(30_000)
        try:
            yield tab
        finally:
            tab.screenshot(path=str(ARTIFACTS / "browser-last.png"), full_page=True)
            browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def wait_idle(page) -> None:
    """Until Streamlit has finished the current script run (its status widget says nothing is running)."""
    page.wait_for_selector("[data-testid=stApp][data-test-script-state=notRunning]", timeout=60_000)


def test_submit_sl_run_watch_it_finish_then_chat(studio, page):
    page.goto(studio)
    page.get_by_text("Local backend").wait_for()
    page.get_by_text("is ready (local, CPU)").wait_for(timeout=60_000)
    wait_idle(page)
    shot(page, "home")

    page.get_by_role("link", name="New run").first.click()
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    for label, value in (("Max steps", "3"), ("Batch size", "2"), ("Eval every (steps)", "2")):
        field = page.get_by_label(label, exact=True)
        field.fill(value)
        field.press("Tab")
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("cookbook sl").first.wait_for()
    shot(page, "new-run")

    page.get_by_role("button", name="Start run").click()
    page.wait_for_url("**/run?run=sl-*", timeout=60_000)
    page.get_by_role("tab", name="Overview").wait_for()
    page.locator("[data-testid=stPlotlyChart]").first.wait_for(timeout=180_000)  # the first step's metrics
    shot(page, "run-training")
    page.locator(".stMarkdownBadge", has_text="completed").wait_for(timeout=300_000)
    page.locator("[data-testid=stPlotlyChart] .main-svg").first.wait_for()
    wait_idle(page)
    shot(page, "run-completed")
    assert page.locator("[data-testid=stPlotlyChart]").count() >= 2  # loss and learning-rate charts at least

    page.goto(f"{studio}/runs")
    page.locator("[data-testid=stDataFrame]").wait_for()
    wait_idle(page)
    shot(page, "runs")

    page.goto(f"{studio}/chat")
    page.get_by_text("System prompt and sampling").click()
    max_tokens = page.get_by_label("Max tokens", exact=True)
    max_tokens.fill("24")
    max_tokens.press("Tab")
    wait_idle(page)
    box = page.locator("[data-testid=stChatInputTextArea]")
    box.fill("What is the capital of France?")
    box.press("Enter")
    assistant = page.locator("[data-testid=stChatMessage]").nth(1)
    assistant.wait_for(timeout=60_000)
    wait_idle(page)
    reply = assistant.inner_text().strip()
    shot(page, "chat")
    assert len(reply) > 3, f"the assistant's reply is empty: {reply!r}"
