"""Multi-turn, tool-using RL on the real default model (slow): a short env=calculator run completes, logs each
episode's turns and tool calls, and its transcripts carry every turn (the reply, and any tool call's result)."""

from __future__ import annotations

import pytest

from cookbook_engine.config import RLConfig
from tests.test_rl_mix_model import run_to_completion

pytestmark = pytest.mark.slow


def test_a_short_calculator_run_trains_on_multi_turn_episodes(home, default_model_ready):
    config = RLConfig(
        env="calculator",
        max_turns=2,
        group_size=2,
        groups_per_batch=2,
        max_tokens=16,
        temperature=1.0,
        max_steps=2,
        num_eval_problems=2,
        eval_every=0,
        save_every=0,
    )
    metrics, trained, transcripts = run_to_completion(config)
    assert len(trained) == 2 and trained["env/all/turns"].between(1, 2).all()
    assert trained["env/all/tool_calls"].notna().all() and metrics["test/env/all/correct"].notna().any()
    assert len(transcripts) == 8
    for details in transcripts["metrics"]:
        assert 1 <= len(details["turns"]) <= 2 and all("reply" in turn for turn in details["turns"])
        called = [turn for turn in details["turns"] if "tool" in turn]
        assert all("result" in turn for turn in called)  # a call's result is in the transcript
