"""Sweeps: a grid or list of configurations expands into checked members (bad settings named by member before
anything runs), and on the real default model a three-member sweep trains each member in turn, evaluates each on
the same eval set, marks a failing member while the others go on, and ends in one table; the CLI prints it."""

from __future__ import annotations

import json

import pytest

from cookbook_engine.evals import sweeps


def test_a_grid_expands_to_every_combination_with_the_varying_settings_named():
    plan = sweeps.plan({"kind": "sl", "base": {"max_steps": 2, "dataset": "builtin:facts"},
                        "grid": {"learning_rate": [1e-4, 1e-3], "lora_rank": [8, 16, 32]},
                        "evals": ["builtin:facts-nll"]})
    assert len(plan.members) == 6
    assert [(m.config.learning_rate, m.config.lora_rank) for m in plan.members[:3]] == [
        (1e-4, 8), (1e-4, 16), (1e-4, 32)]
    assert all(m.config.max_steps == 2 for m in plan.members)
    keys = sweeps.varying_keys([{"settings": m.settings} for m in plan.members])
    assert keys == ["learning_rate", "lora_rank"]


def test_a_list_of_configurations_may_mix_kinds(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("- {max_steps: 3}\n- {kind: dpo, dataset: 'builtin:concise-prefs', dpo_beta: 0.2}\n")
    plan = sweeps.plan(sweeps.load_file(path))
    assert [m.kind for m in plan.members] == ["sl", "dpo"] and plan.members[1].config.dpo_beta == 0.2
    as_json = tmp_path / "sweep.json"
    as_json.write_text(json.dumps({"configs": [{"max_steps": 1}], "evals": "builtin:facts-nll"}))
    assert sweeps.plan(sweeps.load_file(as_json)).evals == ["builtin:facts-nll"]


def test_bad_sweeps_are_refused_naming_the_member_and_setting(tmp_path):
    with pytest.raises(sweeps.SweepError, match="member 1: .*lora_rank=0: must be at least 1"):
        sweeps.plan({"grid": {"lora_rank": [8, 0]}})
    with pytest.raises(sweeps.SweepError, match="member 0: colour: unknown setting"):
        sweeps.plan({"configs": [{"colour": "red"}]})
    with pytest.raises(sweeps.SweepError, match="either `grid`"):
        sweeps.plan({"base": {}})
    with pytest.raises(sweeps.SweepError, match="unknown keys \\['grids'\\]"):
        sweeps.plan({"grids": {}})
    with pytest.raises(ValueError, match="builtin:nope"):
        sweeps.plan({"configs": [{}], "evals": ["builtin:nope"]})
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [unclosed")
    with pytest.raises(sweeps.SweepError, match="bad.yaml: not valid YAML"):
        sweeps.load_file(bad)


@pytest.mark.slow
def test_a_sweep_trains_and_evaluates_each_member_and_ends_in_one_table(home, default_model_ready, tmp_path,
                                                                        capsys):
    from cookbook_engine.cli import main

    spec = {"name": "tiny", "kind": "sl",
            "base": {"max_steps": 1, "batch_size": 2, "lora_rank": 4, "eval_every": 0, "save_every": 0,
                     "max_examples": 8},
            "configs": [{"learning_rate": 1e-3}, {"learning_rate": 1e-4},
                        {"learning_rate": 1e-3, "dataset": str(tmp_path / "missing.jsonl")}],
            "evals": ["builtin:facts-nll"], "max_examples": 2}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec))
    assert main(["sweep", str(path)]) == 0
    printed = capsys.readouterr().out

    store = sweeps.EvalStore()
    [sweep] = store.list_sweeps()
    assert sweep["status"] == "completed"
    table = sweeps.table(store, sweep["sweep_id"])
    assert table["member"].tolist() == ["base", 0, 1, 2]
    assert table["status"].tolist() == ["", "completed", "completed", "failed"]
    assert "missing.jsonl" in table["error"].iloc[3]
    assert all(text.startswith("train_mean_nll=") for text in table["training metric"].iloc[1:3])
    nll = table["facts-nll · nll"]
    assert all("[" in text for text in nll.iloc[:3]) and nll.iloc[3] == ""
    assert "facts-nll · nll" in printed and "missing.jsonl" in printed
