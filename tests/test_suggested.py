"""Suggested settings for the built-in data (cookbook_engine/sl/suggested.py): learning_rate=auto trains with the
measured rate on the measured data and model only, the measured step counts are what the settings give on today's
data, the check warns about settings far from them, and a run says how many passes over the data its steps make."""

import pytest

from cookbook_engine.config import DPOConfig, SLConfig
from cookbook_engine.data import loading as datasets
from cookbook_engine.sl import loop as supervised, suggested
from cookbook_engine.training.learning_rate import DPO_LR_SCALE, learning_rate
from cookbook_engine.training.lora_a import lora_a_used


def test_learning_rate_auto_uses_the_measured_rate_for_measured_data_only():
    facts, prefs = suggested.MEASURED[("sl", "builtin:facts")], suggested.MEASURED[("dpo", "builtin:concise-prefs")]
    assert learning_rate(SLConfig(dataset="builtin:facts")) == facts.learning_rate
    assert learning_rate(SLConfig(dataset="facts")) == facts.learning_rate  # a bare built-in name
    assert learning_rate(SLConfig(dataset="builtin:persona")) == pytest.approx(1e-3)  # the model's
    assert learning_rate(SLConfig(dataset="builtin:facts", learning_rate=3e-4)) == 3e-4
    assert learning_rate(DPOConfig()) == prefs.learning_rate
    assert learning_rate(DPOConfig(dataset="my.jsonl")) == pytest.approx(1e-3 * DPO_LR_SCALE)
    assert suggested.measured_for(SLConfig(model="/some/other/model")) is None
    assert suggested.measured_for(SLConfig(backend="tinker", model="meta-llama/Llama-3.1-8B")) is None
    assert "measured on builtin:facts" in suggested.reason(facts, "facts")


@pytest.mark.parametrize("key", list(suggested.MEASURED))
def test_measured_step_counts_are_what_the_settings_give(key):
    kind, dataset = key
    measured = suggested.MEASURED[key]
    config = (SLConfig if kind == "sl" else DPOConfig)(
        dataset=dataset, batch_size=measured.batch_size, num_epochs=measured.num_epochs
    )
    if kind == "sl":
        train = datasets.load_chat_dataset(dataset, test_fraction=config.test_fraction, seed=config.seed).train
    else:
        train, _ = datasets.load_preference_dataset(dataset, test_fraction=config.test_fraction, seed=config.seed)
    assert supervised.plan_steps(config, len(train))[1] == measured.steps
    if kind == "dpo":  # the default DPO run is the measured one
        assert (config.dpo_beta, config.rpo_alpha, config.batch_size, config.max_steps) == (
            measured.dpo_beta,
            measured.rpo_alpha,
            8,
            0,
        )


def test_settings_far_from_the_measured_ones_are_named():
    def far(config, rate, steps):
        return suggested.far_from_suggested(config, rate, steps, lora_a_used(config))

    config = SLConfig(dataset="builtin:facts", lora_rank=8)
    assert far(config, 1e-3, 103) == []
    notes = far(config, 1e-5, 10)
    assert len(notes) == 2 and "learning rate 1e-05" in notes[0] and "10 steps of 8" in notes[1]
    assert far(SLConfig(dataset="builtin:facts"), 1e-3, 103) == []  # lora_rank=auto: the measured rank
    (rank,) = far(SLConfig(dataset="builtin:facts", lora_rank=32), 1e-3, 103)
    assert "LoRA rank 32 with lora_a=null_space: measured at rank 8" in rank
    assert far(SLConfig(dataset="builtin:facts", lora_a="trained"), 1e-3, 103) == []
    assert far(SLConfig(dataset="my.jsonl"), 1e-6, 1) == []  # nothing measured there
    assert "DPO beta 1" in far(DPOConfig(dpo_beta=1.0), 5e-4, 28)[0]
    assert "rpo_alpha 0 is plain DPO" in far(DPOConfig(rpo_alpha=0), 5e-4, 28)[0]


def test_a_run_says_how_many_passes_its_steps_make():
    assert supervised.passes_note(SLConfig(), 13, 13) == "1 pass over the data (13 steps each)"
    assert supervised.passes_note(SLConfig(num_epochs=2), 13, 26) == "2 passes over the data (13 steps each)"
    assert supervised.passes_note(SLConfig(max_steps=20), 13, 20) == (
        "1.54 passes over the data (13 steps each), set by max_steps=20, not num_epochs=1"
    )


def test_the_check_warns_when_a_run_may_overwrite_what_the_model_knew():
    facts = suggested.MEASURED[("sl", "builtin:facts")]
    config = SLConfig(dataset="builtin:facts", lora_rank=facts.lora_rank)
    rows = facts.steps * facts.batch_size
    assert suggested.overwrite_note(config, facts.learning_rate, facts.steps, rows, "null_space") == ""  # the demo
    note = suggested.overwrite_note(
        config, facts.learning_rate, facts.steps, rows, "trained"
    )  # the rows that overwrote
    assert "What is the capital of France?" in note
    three = SLConfig(dataset="builtin:facts", num_epochs=3)
    note = suggested.overwrite_note(three, 2e-3, 3 * facts.steps, rows, "null_space")
    assert "3 passes at rate 0.002" in note and "What is the capital of France?" in note and "builtin:retention" in note
    mine = SLConfig(dataset="my.jsonl")
    assert "1 pass at rate 0.002 over 200 examples" in suggested.overwrite_note(mine, 2e-3, 25, 200)
    assert suggested.overwrite_note(mine, 5e-4, 25, 200) == ""  # a low rate
    assert suggested.overwrite_note(mine, 2e-3, 250, 2000) == ""  # a large dataset
    assert suggested.overwrite_note(DPOConfig(), 2e-3, 100, 200) == ""  # SL only


def test_lora_rank_auto_trains_the_rank_measured_for_the_data_and_32_elsewhere():
    """One rule for the CLI, sweeps and the form (training/lora_a.rank_used): a set rank wins; auto is the facts'
    measured rank only with the lora_a it was measured with, on the local default model."""
    from cookbook_engine import config as cfg
    from cookbook_engine.training.lora_a import DEFAULT_LORA_RANK, rank_note, rank_used

    facts = suggested.MEASURED[("sl", "builtin:facts")]
    assert cfg.parse_overrides("sl", ["lora_rank=auto"]).lora_rank is None and SLConfig().lora_rank is None
    assert rank_used(SLConfig(dataset="builtin:facts")) == facts.lora_rank == 8
    assert rank_note(SLConfig(dataset="builtin:facts")) == "auto (8, measured)"
    assert (
        rank_used(SLConfig(dataset="builtin:facts", lora_rank=16)) == 16 and rank_note(SLConfig(lora_rank=16)) == "16"
    )
    assert rank_used(SLConfig(dataset="builtin:facts", lora_a="trained")) == DEFAULT_LORA_RANK  # measured with A fixed
    assert rank_used(SLConfig(dataset="builtin:persona")) == DEFAULT_LORA_RANK
    assert rank_note(SLConfig(dataset="builtin:persona")) == f"auto ({DEFAULT_LORA_RANK})"
    assert rank_used(SLConfig(dataset="builtin:facts", backend="tinker", model="meta-llama/Llama-3.1-8B")) == 32
    assert rank_used(DPOConfig()) == rank_used(cfg.RLConfig()) == DEFAULT_LORA_RANK
    assert cfg.from_dict("sl", {"dataset": "builtin:facts", "lora_rank": 32}).lora_rank == 32  # a stored run's own
    assert rank_note(DPOConfig(start_checkpoint="/ckpt/sft/state")) == "the start checkpoint's"  # its saved rank
