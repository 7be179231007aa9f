"""Sweeps: a grid or list of configurations expands into checked members (bad settings named by member before
anything runs), the orchestration (a failing member marked, cancel, resume continuing the stopped run) with
stand-in run and eval managers, and on the real default model a three-member sweep trains each member in turn,
evaluates each on the same eval set, marks a failing member while the others go on, and ends in one table; the CLI
prints it."""

from __future__ import annotations

import json
import time

import pytest

from cookbook_engine.evals import sweeps


def test_a_grid_expands_to_every_combination_with_the_varying_settings_named():
    plan = sweeps.plan(
        {
            "kind": "sl",
            "base": {"max_steps": 2, "dataset": "builtin:facts"},
            "grid": {"learning_rate": [1e-4, 1e-3], "lora_rank": [8, 16, 32]},
            "evals": ["builtin:facts-nll"],
        }
    )
    assert len(plan.members) == 6
    assert [(m.config.learning_rate, m.config.lora_rank) for m in plan.members[:3]] == [
        (1e-4, 8),
        (1e-4, 16),
        (1e-4, 32),
    ]
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


def test_a_sweep_takes_mixes_multi_turn_envs_and_distillation_and_refuses_their_bad_settings():
    plan = sweeps.plan(
        {
            "kind": "rl",
            "base": {"max_steps": 2, "max_turns": 2},
            "grid": {"env": ["arithmetic:2,calculator:1", "calculator"], "kl_penalty_coef": [0.0, 0.1]},
            "evals": ["builtin:calculator", "builtin:arithmetic-fresh"],
        }
    )
    assert [m.config.env for m in plan.members[::2]] == ["arithmetic:2,calculator:1", "calculator"]
    assert plan.evals == ["builtin:calculator", "builtin:arithmetic-fresh"]
    mixed = sweeps.plan(
        {
            "configs": [
                {"dataset": "builtin:facts:2,builtin:persona:1"},
                {
                    "kind": "distill",
                    "mode": "prompt",
                    "teacher": "base",
                    "context": "builtin:pip",
                    "dataset": "builtin:persona",
                },
            ]
        }
    )
    assert [m.kind for m in mixed.members] == ["sl", "distill"]
    with pytest.raises(sweeps.SweepError, match="member 1: .*max_turns=0: env=calculator is multi-turn"):
        sweeps.plan({"kind": "rl", "grid": {"max_turns": [2, 0]}, "base": {"env": "calculator"}})
    with pytest.raises(sweeps.SweepError, match="member 0: .*calculator:0"):
        sweeps.plan({"kind": "rl", "configs": [{"env": "calculator:0"}]})


@pytest.mark.slow
def test_a_sweep_trains_and_evaluates_each_member_and_ends_in_one_table(home, default_model_ready, tmp_path, capsys):
    from cookbook_engine.cli import main

    spec = {
        "name": "tiny",
        "kind": "sl",
        "base": {"max_steps": 1, "batch_size": 2, "lora_rank": 4, "eval_every": 0, "save_every": 0, "max_examples": 8},
        "configs": [
            {"learning_rate": 1e-3},
            {"learning_rate": 1e-4},
            {"learning_rate": 1e-3, "dataset": str(tmp_path / "missing.jsonl")},
        ],
        "evals": ["builtin:facts-nll"],
        "max_examples": 2,
    }
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec))
    assert main(["sweep", str(path)]) == 0
    printed = capsys.readouterr().out

    store = sweeps.EvalStore()
    [sweep] = store.list_sweeps()
    assert sweep["status"] == "completed"
    table = sweeps.table(store, sweep["sweep_id"])
    assert table["member"].tolist() == ["base", "0", "1", "2"]
    assert table["status"].tolist() == ["", "completed", "completed", "failed"]
    assert "missing.jsonl" in table["error"].iloc[3]
    assert all(text.startswith("train_mean_nll=") for text in table["training metric"].iloc[1:3])
    nll = table["facts-nll · nll"]
    assert all("[" in text for text in nll.iloc[:3]) and nll.iloc[3] == ""
    assert "facts-nll · nll" in printed and "missing.jsonl" in printed


class FakeRuns:
    """A RunManager stand-in that 'trains' at once: it records the run and a final checkpoint in storage, or fails
    runs whose dataset is named 'broken'. `hold` keeps runs alive until released (to cancel a sweep mid-way)."""

    def __init__(self, store):
        import threading

        self.store, self.started, self.resumed, self.cancelled = store, [], [], []
        self.hold = threading.Event()
        self.hold.set()

    def start(self, config):
        from cookbook_engine.data.loading import DatasetError

        if config.dataset == "broken":
            raise DatasetError("broken: no such file")
        run_id = f"run-{len(self.started)}"
        self.started.append(run_id)
        self.store.create_run(
            run_id,
            name=config.name,
            kind=config.kind,
            backend="local",
            base_model=config.model,
            config={"learning_rate": config.learning_rate},
            log_dir="/tmp/x",
            status="running",
        )
        self.store.log_metrics(run_id, 1, {"train_mean_nll": config.learning_rate * 100})
        return run_id

    def resume(self, run_id):
        self.resumed.append(run_id)
        self.store.update_run(run_id, status="running")

    def is_alive(self, run_id):
        if not self.hold.is_set():
            return True
        if self.store.get_run(run_id)["status"] == "running":
            self.store.update_run(run_id, status="completed")
            self.store.add_checkpoint(
                run_id,
                step=1,
                name="final",
                kind="both",
                state_path=f"/s/{run_id}",
                sampler_path=f"/w/{run_id}",
                loop_state={"final": True},
            )
        return False

    def cancel(self, run_id):
        self.cancelled.append(run_id)
        self.store.update_run(run_id, status="cancelled")

    def wait(self, run_id, timeout=None):
        return self.store.get_run(run_id)


class FakeEvals:
    """An EvalManager stand-in: accuracy = the run's learning rate * 1000, stored like a real result."""

    def __init__(self, store):
        self.store, self.count = store, 0

    def start(self, prepared, echo=None, sweep_id=None):
        from cookbook_engine.evals import evaluators, jobs, stats

        self.count += 1
        eval_id = f"eval-{self.count}"
        target = prepared.targets[0]
        self.store.create_job(
            eval_id,
            name=eval_id,
            models=[target.spec],
            eval_sets=["builtin:facts-nll"],
            settings={},
            total=1,
            sweep_id=sweep_id,
        )
        value = 0.1 if target.run_id is None else float(target.run_id[-1]) / 10 + 0.2
        result = evaluators.EvalResult("builtin:facts-nll", "nll", [stats.Metric("nll", value, 4, value, value)], [])
        jobs.save(self.store, eval_id, target, f"k{eval_id}", result)
        self.store.update_job(eval_id, status="completed")
        return eval_id

    def wait(self, eval_id, timeout=None):
        return self.store.get_job(eval_id)


def test_a_sweep_orchestrates_members_marks_a_failure_and_resumes_after_a_cancel(home):
    from storage import Store

    runs = FakeRuns(Store.default())
    runner = sweeps.SweepRunner(runs, FakeEvals(sweeps.EvalStore()), sweeps.EvalStore())
    plan = sweeps.plan(
        {
            "name": "s",
            "configs": [{"learning_rate": 1e-3}, {"dataset": "broken"}, {"learning_rate": 2e-3}],
            "evals": ["builtin:facts-nll"],
        }
    )
    runs.hold.clear()  # the first member keeps training until released
    sweep_id = runner.start(plan)
    deadline = time.monotonic() + 30
    while not runs.started and time.monotonic() < deadline:
        time.sleep(0.05)
    runner.cancel(sweep_id)
    assert runner.wait(sweep_id, timeout=30)["status"] == "cancelled"
    assert runs.cancelled == ["run-0"]
    runs.hold.set()
    runner.resume(sweep_id)
    sweep = runner.wait(sweep_id, timeout=30)
    assert sweep["status"] == "completed"
    assert runs.resumed == ["run-0"] and runs.started == ["run-0", "run-1"]  # run-0 resumed, not started again
    assert [m["status"] for m in sweep["members"]] == ["completed", "failed", "completed"]
    assert "broken: no such file" in sweep["members"][1]["error"]
    table = sweeps.table(runner.store, sweep_id)
    assert table["member"].tolist() == ["base", "0", "1", "2"]
    assert table["facts-nll · nll"].tolist() == [
        "0.100 [0.100, 0.100]",
        "0.200 [0.200, 0.200]",
        "",
        "0.300 [0.300, 0.300]",
    ]
    assert table["training metric"].tolist() == ["", "train_mean_nll=0.1000", "", "train_mean_nll=0.2000"]
