"""GPU smoke test: SL, DPO and RL run two steps each on the GPU that device=auto picks (CUDA or Apple MPS), with
finite losses and the model on that device. Where there is no GPU (this project's CI machines) it is reported as
skipped, never as passed: the README says what has and has not run on a GPU."""

from __future__ import annotations

import math

import pytest

from cookbook_engine import device
from cookbook_engine.config import DPOConfig, RLConfig, SLConfig
from cookbook_engine.runs import RunManager
from storage import Store

CHOICE = device.choose("auto")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHOICE.device == "cpu", reason=f"no GPU here: {CHOICE.reason}")]


@pytest.mark.parametrize(
    "config",
    [
        SLConfig(max_steps=2, batch_size=4, save_every=0, eval_every=0, lora_rank=8),
        DPOConfig(max_steps=2, batch_size=4, save_every=0, eval_every=0, lora_rank=8),
        RLConfig(
            env="arithmetic",
            max_steps=2,
            groups_per_batch=2,
            group_size=4,
            max_tokens=16,
            eval_every=0,
            num_eval_problems=2,
            save_every=0,
            lora_rank=8,
        ),
    ],
    ids=["sl", "dpo", "rl"],
)
def test_two_steps_on_the_gpu(config, home, default_model_ready):
    from cookbook_engine.backends.local import get_worker

    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=900)
    assert run["status"] == "completed", run.get("traceback")
    key = {"sl": "train_mean_nll", "dpo": "dpo_loss", "rl": "env/all/reward/total"}[config.kind]
    values = Store.default().get_metrics(run_id, [key])["value"].tolist()
    assert len(values) == 2 and all(math.isfinite(v) for v in values), values
    assert get_worker(config.model, "auto").device.type == CHOICE.device
