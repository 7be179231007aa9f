"""End to end in a real browser: the studio as a user runs it (`cookbook studio` on a free localhost port, its own
COOKBOOK_HOME), driven by Playwright through Debian's headless chromium (no browser download; scripts/browser-deps.sh
installs chromium). A short SL run is submitted from the New run form, followed to completion with its chart
drawn, the chat answers a message from the real default model, the run's checkpoint is exported and the run is
deleted with its files (nothing is selected afterwards). The chat is also used the awkward way: a message sent
while a reply streams waits and the reply is kept whole, Stop keeps the partial text, the conversation saves as
JSONL and its turns go into a dataset. Screenshots land in test-artifacts/."""

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
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

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
        process = subprocess.Popen(
            [sys.executable, "-m", "cookbook_engine.cli", "studio", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
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


def open_chat(studio: str, page, max_tokens: int):
    """The Chat page with Max tokens set; returns the message box."""
    page.goto(f"{studio}/chat")
    page.get_by_text("System prompt and sampling").wait_for()
    wait_idle(page)  # a click before the first script run ends is lost when it redraws
    page.get_by_text("System prompt and sampling").click()
    field = page.get_by_label("Max tokens", exact=True)
    field.fill(str(max_tokens))
    field.press("Tab")
    wait_idle(page)
    return page.locator("[data-testid=stChatInputTextArea]")


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
    page.get_by_text("cookbook sl ").first.wait_for()
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

    box = open_chat(studio, page, max_tokens=24)
    box.fill("What is the capital of France?")
    box.press("Enter")
    assistant = page.locator("[data-testid=stChatMessage]").nth(1)
    assistant.wait_for(timeout=60_000)
    wait_idle(page)
    reply = assistant.inner_text().strip()
    shot(page, "chat")
    assert len(reply) > 3, f"the assistant's reply is empty: {reply!r}"

    export_then_delete_the_run(studio, page)


def export_then_delete_the_run(studio: str, page) -> None:
    """Export the run's final checkpoint, then delete the run from the Runs page: the dialog says what it frees,
    the export goes with it, and afterwards no row is selected."""
    page.goto(f"{studio}/checkpoints")
    page.get_by_role("button", name="Build merged model").click()
    page.get_by_text("Merged model saved").wait_for(timeout=300_000)
    wait_idle(page)
    page.goto(f"{studio}/checkpoints")
    page.get_by_role("heading", name="Exports").wait_for()
    page.get_by_text("-merged", exact=False).first.wait_for(timeout=60_000)  # the list streams in after the heading
    shot(page, "checkpoints-exports")

    page.goto(f"{studio}/runs")
    table = page.locator("[data-testid=stDataFrame]")
    table.wait_for()
    wait_idle(page)
    box = table.bounding_box()
    page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # the first row's selection box (the only run)
    page.get_by_text("Selected:").wait_for()
    page.get_by_role("button", name="Delete").click()
    from playwright.sync_api import expect

    dialog = page.get_by_role("dialog")
    dialog.get_by_text("freeing").wait_for()
    # the dialog draws its lines one by one; on a loaded machine "freeing" can show before the exports line
    expect(dialog).to_contain_text("1 export", timeout=60_000)
    assert "checkpoint folder" in dialog.inner_text()
    shot(page, "delete-confirmation")
    dialog.get_by_role("button", name="Delete 1 run").click()
    page.get_by_text("freed").wait_for()
    wait_idle(page)
    shot(page, "runs-after-delete")
    page.goto(f"{studio}/checkpoints")
    page.get_by_text("No exports yet").wait_for()


def assistant_text(page, index: int) -> str:
    return page.locator("[data-testid=stChatMessage]").nth(index).inner_text().strip()


def reply_text(page, index: int) -> str:
    """The model's words in a chat message (its last markdown block; captions and buttons come before it)."""
    return (
        page.locator("[data-testid=stChatMessage]")
        .nth(index)
        .locator("[data-testid=stMarkdownContainer]")
        .last.inner_text()
        .strip()
    )


def test_chat_send_during_a_reply_stop_save_and_add_to_a_dataset(studio, page):
    box = open_chat(studio, page, max_tokens=300)
    box.fill("Write a long story about a dragon.")
    box.press("Enter")
    page.wait_for_function(
        "() => { const m = document.querySelectorAll('[data-testid=stChatMessage]');"
        " if (m.length < 2) return false; const t = m[1].querySelectorAll("
        "'[data-testid=stMarkdownContainer]'); return t.length > 1 && "
        "t[t.length - 1].innerText.length > 40; }",
        timeout=180_000,
    )
    partial = reply_text(page, 1)  # the reply so far, while it streams
    box.fill("Now write a long poem about the sea.")  # while the first reply is still being written
    box.press("Enter")
    page.get_by_text("Now write a long poem about the sea.").wait_for()
    shot(page, "chat-queued")
    second = page.locator("[data-testid=stChatMessage]").nth(3)
    second.get_by_role("button", name="Stop").wait_for(timeout=300_000)  # the first reply is done: now the second
    second.get_by_role("button", name="Stop").click()
    wait_idle(page)
    page.get_by_text("stopped by you").wait_for()
    first = reply_text(page, 1)
    assert first.startswith(partial) and len(first) > len(partial)  # the interrupted reply was kept and finished
    assert "no reply" not in assistant_text(page, 1)
    shot(page, "chat-stopped")

    second_empty = "stopped before it wrote anything" in assistant_text(page, 3)  # Stop may beat the first token
    with page.expect_download() as download:
        page.get_by_role("button", name="Save conversation (.jsonl)").click()
    lines = Path(download.value.path()).read_text().splitlines()
    messages = __import__("json").loads(lines[0])["messages"]
    # a reply stopped before it wrote anything is saved without its question (never two user turns in a row)
    expected_roles = ["user", "assistant"] if second_empty else ["user", "assistant", "user", "assistant"]
    assert [m["role"] for m in messages] == expected_roles and len(lines) == 1

    page.get_by_text("Add turns to a dataset").click()
    turns = 1 if second_empty else 2  # an empty reply is not ticked
    page.get_by_role("button", name=f"Add {turns} turn{'s' if turns > 1 else ''}").click()
    page.get_by_text(f"Added {turns} example{'s' if turns > 1 else ''} to chat-examples").wait_for()
    shot(page, "chat-added-to-dataset")
