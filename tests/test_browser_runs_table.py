"""The Runs page's table in a real browser at a laptop's 1440x900 with the sidebar open (the studio and browser set-up
of tests/test_browser.py): every column fits beside the others, so none is off-screen or needs a sideways scroll.
The runs (one of each kind, one of them training in a live process so its CPU and memory show) are recorded in the
studio's home before it starts (no training), so the test takes seconds of model-free work. The screenshot lands in
test-artifacts/runs-1440.png."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_browser import CHROMIUM, page, shot, studio_process, wait_idle  # noqa: F401 (page is a fixture)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]


@pytest.fixture
def studio_with_every_kind(tmp_path, monkeypatch):
    """A studio whose home holds a run of each kind with its key metric, the RL one running in a live process."""
    from storage.db import Store

    home = tmp_path / "home"
    monkeypatch.setenv("COOKBOOK_HOME", str(home))
    store = Store.default()
    owner = subprocess.Popen(["sleep", "600"])  # stands in for the process training the active run
    try:
        seed_runs(store, home, owner.pid)
        with studio_process(home, tmp_path / "studio.log", OMP_NUM_THREADS="1") as (url, _):
            yield url
    finally:
        owner.kill()
        owner.wait()


def seed_runs(store, home: Path, owner_pid: int) -> None:
    from datetime import timedelta

    from cookbook_engine import models
    from cookbook_engine.training.metric_names import KEY_METRIC
    from storage import utcnow

    values = {"sl": 1.23456, "dpo": 0.693147, "rl": 0.4375, "distill": 0.0123456}
    for kind in ("sl", "dpo", "distill", "rl"):  # the last is the newest, shown first
        run_id = f"{kind}-20261127-101010-abcd"
        store.create_run(
            run_id,
            name=f"{kind}-20261127-101010-abcd",
            kind=kind,
            backend="local",
            base_model=models.DEFAULT_MODEL,
            config={},
            log_dir=home / "runs" / run_id,
            total_steps=120,
        )
        for step, seconds in enumerate((12.5, 25.1, 37.4)):
            store.log_metrics(run_id, step, {KEY_METRIC[kind]: values[kind], "time/total": seconds})
        if kind == "rl":
            store.claim_run(run_id, owner_pid)
            store.update_run(run_id, step=3)
        else:
            finished = utcnow() - timedelta(hours=2)
            store.update_run(
                run_id, status="completed", step=120, started_at=finished - timedelta(seconds=725), finished_at=finished
            )


def test_every_runs_column_fits_at_1440_with_the_sidebar_open(studio_with_every_kind, page):  # noqa: F811
    page.set_viewport_size({"width": 1440, "height": 900})
    page.set_default_timeout(120_000)  # a busy 2-core machine
    page.goto(f"{studio_with_every_kind}/runs")
    table = page.locator("[data-testid=stDataFrame]")
    table.wait_for()
    page.get_by_text("is training: CPU").wait_for()  # the active run's CPU and memory, under the table
    assert page.locator("[data-testid=stSidebar]").is_visible()
    scroller = table.locator(".dvn-scroller").first
    scroller.wait_for()
    overflow = scroller.evaluate("el => el.scrollWidth - el.clientWidth")
    shot(page, "runs-1440")
    assert overflow <= 1, f"the runs table is {overflow} px wider than its place at 1440 px"
