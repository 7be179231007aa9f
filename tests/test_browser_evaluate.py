"""The Evaluate page in a real browser (the studio and browser set-up of tests/test_browser.py): pick two examples
of the facts probes for the base model, press Evaluate, and see the leaderboard with its interval, then the
answers beside the reference. The screenshot lands in test-artifacts/evaluate.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import CHROMIUM, page, shot, studio, wait_idle  # noqa: F401 (page and studio are fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]


def test_evaluate_the_base_model_and_see_the_leaderboard(studio, page):  # noqa: F811
    page.goto(f"{studio}/evaluate")
    page.get_by_role("button", name="Evaluate").wait_for()
    wait_idle(page)
    field = page.get_by_label("Examples per set (0 = all)", exact=True)
    field.fill("2")
    field.press("Tab")
    page.get_by_role("button", name="Evaluate").click()
    page.get_by_text("running:").wait_for(timeout=60_000)  # the live progress line
    page.get_by_role("heading", name="Leaderboard").wait_for(timeout=600_000)  # shown once results exist
    page.get_by_role("heading", name="Answers").wait_for()
    wait_idle(page)
    page.locator("[data-testid=stDataFrame]").nth(1).wait_for()  # the leaderboard, then the answers
    assert page.get_by_text("value [95% interval]").count() == 1
    shot(page, "evaluate")
