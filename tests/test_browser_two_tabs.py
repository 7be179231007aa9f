"""Two browser tabs on one studio (the studio and browser set-up of tests/test_browser.py): a run open in one tab and
deleted from the other is never replaced by another run. The first tab's Delete and Chat with it say the run is gone
(naming it) instead of acting on the newest run; a reload and a mistyped address say the same, and the address is
never rewritten to another run. The runs are recorded in the studio's home before it starts (no training), so the
test takes seconds of model-free work. Screenshots land in test-artifacts/two-tabs-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import CHROMIUM, page, shot, studio_process, wait_idle  # noqa: F401 (page is a fixture)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]

RUNS = {"sl-old": "the-old-run", "sl-mid": "the-middle-run", "sl-new": "the-new-run"}  # oldest first


@pytest.fixture
def studio_with_runs(tmp_path, monkeypatch):
    """A studio whose home already holds three completed runs with a checkpoint folder each."""
    from test_pages_keep_their_run import make_run

    from storage.db import Store

    home = tmp_path / "home"
    monkeypatch.setenv("COOKBOOK_HOME", str(home))
    store = Store.default()
    for run_id, name in RUNS.items():
        make_run(home, run_id, name, store)
    with studio_process(home, tmp_path / "studio.log", OMP_NUM_THREADS="1") as (url, _):
        yield url, store


def open_run(tab, url: str, run_id: str) -> None:
    tab.goto(f"{url}/run?run={run_id}")
    tab.get_by_role("heading", name=RUNS[run_id]).wait_for()
    wait_idle(tab)


def delete_from(tab, url: str, run_id: str) -> None:
    open_run(tab, url, run_id)
    tab.get_by_role("button", name="Delete").click()
    dialog = tab.get_by_role("dialog")
    dialog.get_by_text(RUNS[run_id]).wait_for()
    dialog.get_by_role("button", name="Delete 1 run").click()
    tab.get_by_text("freed").wait_for()
    wait_idle(tab)


def says_gone(tab, run_id: str) -> None:
    tab.get_by_text(f"There is no run {run_id}").wait_for()
    wait_idle(tab)
    assert tab.url.endswith(f"run={run_id}"), tab.url  # the address still names the run it was opened for
    assert tab.get_by_role("dialog").count() == 0
    for name in RUNS.values():
        assert tab.get_by_role("heading", name=name).count() == 0


def test_a_run_deleted_in_another_tab_is_never_replaced_by_another(studio_with_runs, page):  # noqa: F811
    url, store = studio_with_runs
    page.set_default_timeout(120_000)  # a busy 2-core machine
    first, second = page, page.context.browser.new_page(viewport={"width": 1400, "height": 1800})
    second.set_default_timeout(120_000)

    open_run(first, url, "sl-old")
    delete_from(second, url, "sl-old")
    first.get_by_role("button", name="Delete").click()  # the first tab still shows the deleted run
    says_gone(first, "sl-old")
    shot(first, "two-tabs-delete-after-delete")

    open_run(first, url, "sl-mid")
    delete_from(second, url, "sl-mid")
    first.get_by_role("button", name="Chat with it").click()
    says_gone(first, "sl-mid")
    assert "/chat" not in first.url

    first.reload()
    says_gone(first, "sl-mid")
    first.goto(f"{url}/run?run=nope")
    says_gone(first, "nope")
    shot(first, "two-tabs-unknown-run")
    assert store.get_run("sl-new") is not None  # the newest run, one click from deletion before, is untouched
