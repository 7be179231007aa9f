"""Lineage: a run's chain back to the base model through the checkpoints each stage started from, as a person reads
it, and the settings of the next stage (DPO or RL) started from a checkpoint; the New run form builds on them."""

from __future__ import annotations

import pytest

from cookbook_engine import config as cfg, lineage
from storage import Store


def make_run(store: Store, run_id: str, kind: str, parent_run: str | None = None, parent_state: str | None = None):
    store.create_run(
        run_id,
        name=f"{run_id}-name",
        kind=kind,
        backend="local",
        base_model="org/Model-1",
        config={"renderer": "auto", "lora_rank": 8},
        log_dir="/tmp/x",
        parent_run_id=parent_run,
        parent_checkpoint=parent_state,
    )
    store.add_checkpoint(
        run_id,
        step=20,
        name="final",
        kind="both",
        state_path=f"/ckpt/{run_id}/state",
        sampler_path=f"/ckpt/{run_id}/sampler",
    )


def test_a_chain_runs_from_the_base_model_through_each_stage(home):
    store = Store.default()
    make_run(store, "sft", "sl")
    make_run(store, "dpo", "dpo", "sft", "/ckpt/sft/state")
    make_run(store, "rl", "rl", "dpo", "/ckpt/dpo/state")
    stages = lineage.chain("rl", store)
    assert [s.run_id for s in stages] == ["sft", "dpo", "rl"]
    assert [s.parent_step for s in stages] == [None, 20, 20]
    assert lineage.describe(stages, "org/Model-1") == (
        "Model-1 → SFT sft-name (from base) → DPO dpo-name (from step 20) → RL rl-name (from step 20)"
    )
    with pytest.raises(KeyError, match="run nope: not found"):
        lineage.chain("nope", store)


def test_the_next_stage_starts_from_the_checkpoint_with_the_runs_model(home):
    store = Store.default()
    make_run(store, "sft", "sl")
    settings = lineage.next_stage("dpo", store.get_run("sft"), "/ckpt/sft/state")
    config = cfg.from_dict("dpo", settings)
    assert config.start_checkpoint == "/ckpt/sft/state" and config.model == "org/Model-1" and config.name == ""
    assert (config.lora_rank, config.train_attn, config.train_mlp) == (8, True, True)  # the checkpoint's LoRA
    # an RL run from it starts from today's RL defaults, not from what RL runs stored before a setting had
    rl = cfg.from_dict("rl", lineage.next_stage("rl", store.get_run("sft"), "/ckpt/sft/state"))
    assert rl == cfg.with_values(
        cfg.RLConfig(),
        {"model": "org/Model-1", "lora_rank": 8, "train_mlp": True, "start_checkpoint": "/ckpt/sft/state"},
    )
    assert rl.scale_rewards == cfg.RLConfig().scale_rewards and rl.anchor == cfg.RLConfig().anchor
    # an RL run with train_mlp=auto on the default model and env trained attention only: DPO from it keeps that
    rl_config = cfg.to_dict(cfg.RLConfig(lora_rank=8))
    store.create_run(
        "rl0",
        name="rl0",
        kind="rl",
        backend="local",
        base_model=cfg.RLConfig().model,
        config=rl_config,
        log_dir="/tmp/x",
    )
    dpo = cfg.from_dict("dpo", lineage.next_stage("dpo", store.get_run("rl0"), "/ckpt/rl0/state"))
    assert (dpo.train_attn, dpo.train_mlp) == (True, False)
    with pytest.raises(ValueError, match="choose one of dpo, rl"):
        lineage.next_stage("sl", store.get_run("sft"), "/ckpt/sft/state")
    with pytest.raises(ValueError, match="no saved state"):
        lineage.next_stage("rl", store.get_run("sft"), "")
