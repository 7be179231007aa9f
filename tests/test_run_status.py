"""How a run ends and what its log says, with a stand-in loop (no model): a stop asked for after the last step
still leaves the run completed (a resumed run that reached 3/3 used to show "cancelled"), a stop mid-run leaves it
cancelled, and the run log gets a line with the key metrics as steps finish."""

from __future__ import annotations

import types

import pytest

from cookbook_engine import runs
from cookbook_engine.config import SLConfig
from storage import Store


def stand_in_loop(steps_done: int, stop_at_the_end: bool = True):
    """A loop module whose train() logs `steps_done` of 3 steps, then has a stop asked for."""

    async def train(config, ctx, prepared):
        for step in range(steps_done):
            ctx.logger.log_metrics(step, {"train_mean_nll": 2.0 - step / 10, "learning_rate": 1e-3})
            ctx.progress(step + 1, 3)
        if stop_at_the_end:
            ctx.cancel_event.set()  # the Stop button, pressed while the loop saved its final checkpoint

    return types.SimpleNamespace(prepare=lambda config: None, train=train)


@pytest.fixture
def manager(home):
    return runs.RunManager(Store(home / "studio.duckdb"))


@pytest.mark.parametrize("steps_done, status", [(3, "completed"), (2, "cancelled")])
def test_a_stop_after_the_last_step_leaves_the_run_completed(manager, monkeypatch, steps_done, status):
    monkeypatch.setattr(runs, "_loop_for", lambda kind: stand_in_loop(steps_done))
    run_id = manager.start(SLConfig(name="stand-in"), prepared=object())
    assert manager.wait(run_id, timeout=60)["status"] == status


def test_the_run_log_gets_a_line_per_step_with_the_key_metrics(manager, monkeypatch):
    monkeypatch.setattr(runs, "_loop_for", lambda kind: stand_in_loop(3, stop_at_the_end=False))
    run_id = manager.start(SLConfig(name="stand-in"), prepared=object())
    run = manager.wait(run_id, timeout=60)
    log = (runs.Path(run["log_dir"]) / "log.txt").read_text()
    assert "step 3/3 · train_mean_nll=1.8 · learning_rate=0.001" in log and "step 1/3" in log
