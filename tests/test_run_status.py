"""How a run ends and what its log says, with a stand-in loop (no model): a stop asked for after the last step
still leaves the run completed (a resumed run that reached 3/3 used to show "cancelled"), a stop mid-run leaves it
cancelled, and the run log gets a line with the key metrics as steps finish. Also: RL transcripts store a
completion without the special token it stopped on (the raw `<|im_end|>` showed in Transcripts)."""

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
    monkeypatch.setattr(runs, "loop_module", lambda kind: stand_in_loop(steps_done))
    run_id = manager.start(SLConfig(name="stand-in"), prepared=object())
    assert manager.wait(run_id, timeout=60)["status"] == status


def test_the_run_log_gets_a_line_per_step_with_the_key_metrics(manager, monkeypatch):
    monkeypatch.setattr(runs, "loop_module", lambda kind: stand_in_loop(3, stop_at_the_end=False))
    run_id = manager.start(SLConfig(name="stand-in"), prepared=object())
    run = manager.wait(run_id, timeout=60)
    log = (runs.Path(run["log_dir"]) / "log.txt").read_text()
    assert "step 3/3 · train_mean_nll=1.8 · learning_rate=0.001" in log and "step 1/3" in log


def test_rl_transcripts_show_completions_without_the_stop_token(default_model_ready):
    from cookbook_engine import models
    from cookbook_engine.rl.loop import transcript_rows
    from cookbook_engine.rl.types import Rollout, RolloutGroup

    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    answer = tokenizer.encode("The answer is 6.")
    stopped = Rollout([1, 2], answer + [tokenizer.eos_token_id], [0.0] * (len(answer) + 1), "stop", 1.0, {}, {})
    cut = Rollout([1, 2], answer, [0.0] * len(answer), "length", 0.0, {}, {})
    rows = transcript_rows(0, [RolloutGroup([stopped, cut], [])], [[0.5, -0.5]], [False], tokenizer)
    assert [row["completion"] for row in rows] == ["The answer is 6.", "The answer is 6."]  # no <|im_end|>
