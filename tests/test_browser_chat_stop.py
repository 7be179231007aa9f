"""The Chat page's Stop and Regenerate in a real browser (the studio and browser set-up of tests/test_browser.py), on
the real default model: a reply's Stop ends that reply only, so a message queued behind it is still answered; the
last message can be answered again. Screenshots land in test-artifacts/chat-stop-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import CHROMIUM, open_chat, page, reply_text, shot, studio, wait_idle  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]


def test_stop_ends_one_reply_and_the_queued_message_is_still_answered(studio, page):  # noqa: F811
    page.set_default_timeout(120_000)  # the first page load imports torch: slow on a busy 2-core machine
    box = open_chat(studio, page, max_tokens=120)
    box.fill("Write a long story about a dragon.")
    box.press("Enter")
    messages = page.locator("[data-testid=stChatMessage]")
    messages.nth(1).get_by_role("button", name="Stop").wait_for(timeout=180_000)
    box.fill("Name three colours.")  # queued behind the reply being written
    box.press("Enter")
    page.get_by_text("queued: answered after the replies above").wait_for()
    messages.nth(1).get_by_role("button", name="Stop").click()
    page.get_by_text("stopped by you").first.wait_for()
    page.get_by_role("button", name="Regenerate").wait_for(timeout=180_000)  # every reply is done
    wait_idle(page)
    shot(page, "chat-stop-one")
    second = messages.nth(3).inner_text()
    assert "stopped" not in second and reply_text(page, 3), second  # the queued message got its own reply
    assert "stopped by you" in messages.nth(1).inner_text()

    page.get_by_role("button", name="Regenerate").click()
    page.get_by_text("generating").first.wait_for()
    page.get_by_role("button", name="Regenerate").wait_for(timeout=180_000)
    wait_idle(page)
    assert messages.count() == 4  # the last reply was replaced, not added
    assert reply_text(page, 3)
    shot(page, "chat-stop-regenerated")


def test_side_by_side_a_stop_ends_its_own_panes_reply_and_the_other_pane_still_answers(studio, page):  # noqa: F811
    """Issue 27 item 2, side by side: the left pane's Stop ends the left reply; the right pane's reply to the same
    message is still written, and ends unstopped."""
    page.set_default_timeout(120_000)
    box = open_chat(studio, page, max_tokens=120)
    page.get_by_text("Side by side").click()
    page.get_by_text("Right model").wait_for()
    wait_idle(page)
    box.fill("Write a long story about a dragon.")
    box.press("Enter")
    messages = page.locator("[data-testid=stChatMessage]")  # left pane's user, assistant, then the right pane's
    messages.nth(1).get_by_role("button", name="Stop").wait_for(timeout=180_000)
    messages.nth(1).get_by_role("button", name="Stop").click()
    messages.nth(3).get_by_role("button", name="Stop").wait_for(timeout=180_000)  # the right pane's turn came
    page.get_by_role("button", name="Regenerate").wait_for(timeout=180_000)  # every reply is done
    wait_idle(page)
    shot(page, "chat-stop-side-by-side")
    assert "stopped by you" in messages.nth(1).inner_text()
    right = messages.nth(3).inner_text()
    assert "stopped" not in right and reply_text(page, 3), right
