"""Multi-task SL mixes (`dataset=builtin:facts:2,my.jsonl:1`): the syntax and its refusals (a weight below 0, weights
that do not sum to a positive number, an empty entry, a dataset named twice, an unknown dataset, a held-out file
beside a mix), each with one message and nothing written; how an epoch is drawn by weight; the prepared mix with
each dataset's held-out examples; and, on the real default model (slow), a mix that trains only what its weights
say, with per-dataset metrics `test/<name>/nll` and `train/<name>/nll`."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from tinker import types

from cookbook_engine import cli, config as cfg
from cookbook_engine.data import mix
from cookbook_engine.data.loading import DatasetError
from cookbook_engine.sl import loop as sl_loop
from cookbook_engine.sl.data import prepare


def test_datasets_with_weights_are_read_from_one_setting():
    parts = mix.parse_mix("builtin:facts:2, my.jsonl:1,builtin:persona")
    assert [(p.spec, p.weight, p.name) for p in parts] == [
        ("builtin:facts", 2.0, "facts"),
        ("my.jsonl", 1.0, "my"),
        ("builtin:persona", 1.0, "persona"),
    ]
    assert [(p.spec, p.weight) for p in mix.parse_mix("hf:owner/name:train:0.5")] == [("hf:owner/name:train", 0.5)]
    assert not mix.is_mix("builtin:facts") and not mix.is_mix("hf:owner/name:train")
    assert mix.is_mix("builtin:facts:2") and mix.is_mix("a.jsonl,b.jsonl")


def test_a_file_with_a_comma_in_its_name_is_one_dataset(tmp_path):
    path = tmp_path / "reviews,2024.jsonl"
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    path.write_text(json.dumps(row) + "\n")
    assert not mix.is_mix(str(path)) and mix.is_mix(f"{path},builtin:facts")
    assert cfg.validate(cfg.SLConfig(dataset=str(path))) == []


@pytest.mark.parametrize(
    "spec, message",
    [
        ("builtin:facts:0,builtin:persona:0", "the weights sum to 0; give at least one dataset a positive weight"),
        ("builtin:facts:-1,builtin:persona:2", "builtin:facts has weight -1; a weight is a number 0 or more"),
        ("builtin:facts:2,,builtin:persona", "an empty entry between commas"),
        ("builtin:facts:2,builtin:facts:1", "facts named twice"),
        ("builtin:facts:inf,builtin:persona", "weight inf"),
    ],
)
def test_bad_mixes_are_refused_with_one_message_naming_the_problem(spec, message):
    with pytest.raises(DatasetError, match=message):
        mix.parse_mix(spec)
    problems = cfg.validate(cfg.SLConfig(dataset=spec))
    assert len(problems) == 1 and message in problems[0], problems


def test_a_held_out_file_beside_a_mix_is_refused():
    problems = cfg.validate(cfg.SLConfig(dataset="builtin:facts:1,builtin:persona:1", test_dataset="t.jsonl"))
    assert problems == ["test_dataset=t.jsonl: not with a mix of datasets; each one's test_fraction is held out"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("builtin:facts:1,builtin:persona:-2", "builtin:persona has weight -2"),
        ("builtin:facts:2,builtin:nope:1", "builtin:nope: no such built-in dataset"),
    ],
)
def test_the_cli_refuses_a_bad_mix_and_writes_nothing(home, default_model_ready, capsys, spec, message):
    assert cli.main(["sl", f"dataset={spec}", "--dry-run"]) == 2
    assert message in capsys.readouterr().err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_an_epoch_gives_each_dataset_its_weights_share_of_all_the_rows():
    parts = mix.parse_mix("a.jsonl:2,b.jsonl:1,c.jsonl:0")
    counts = mix.shares(parts, [10, 20, 30])
    assert counts == [40, 20, 0]  # 60 rows in all: two thirds, a third, none
    epoch = mix.mixed([list("abcdefghij"), list(range(20)), ["never"] * 30], counts, seed=3)
    tally = Counter(epoch)
    assert len(epoch) == 60 and all(tally[letter] == 4 for letter in "abcdefghij")  # 4 whole passes over a
    assert sorted(x for x in epoch if isinstance(x, int)) == list(range(20)) and "never" not in tally
    assert mix.shares(mix.parse_mix("a:1,b:1,c:1"), [1, 1, 1]) == [1, 1, 1]  # rounding keeps the total


def test_a_prepared_mix_keeps_each_datasets_held_out_examples(default_model_ready):
    config = cfg.SLConfig(dataset="builtin:facts:3,builtin:persona:1", test_fraction=0.1)
    prepared = prepare(config)
    tasks = {task.name: task for task in prepared.tasks}
    assert set(tasks) == {"facts", "persona"}
    total = tasks["facts"].train_rows + tasks["persona"].train_rows
    assert len(prepared.train) == total
    assert (
        abs(tasks["facts"].examples - 0.75 * total) <= 1
        and tasks["facts"].examples + tasks["persona"].examples == total
    )
    drawn = Counter(prepared.task_of[id(datum)] for datum in prepared.train)
    assert drawn == {"facts": tasks["facts"].examples, "persona": tasks["persona"].examples}
    assert tasks["facts"].test and tasks["persona"].test
    assert len(prepared.test) == len(tasks["facts"].test) + len(tasks["persona"].test)
    assert "a mix of facts (weight 3" in prepared.summary()


def test_each_step_logs_each_datasets_train_nll():
    def datum(weights):
        return types.Datum(
            model_input=types.ModelInput.from_ints([1] * len(weights)),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=[1] * len(weights), dtype="int64"),
                "weights": types.TensorData(data=weights, dtype="float32"),
            },
        )

    a, b = datum([0.0, 1.0, 1.0]), datum([1.0, 1.0])
    output = SimpleNamespace(
        loss_fn_outputs=[
            {"logprobs": types.TensorData(data=[-9.0, -1.0, -3.0], dtype="float32")},
            {"logprobs": types.TensorData(data=[-0.5, -0.5], dtype="float32")},
        ]
    )
    metrics: dict[str, float] = {}
    sl_loop.per_task_nll({id(a): "facts", id(b): "persona"})([a, b], output, metrics)
    assert metrics == {"train/facts/nll": pytest.approx(2.0), "train/persona/nll": pytest.approx(0.5)}
    assert np.isfinite(list(metrics.values())).all()


def write_chat(path, question_answers) -> str:
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in question_answers
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.slow
def test_a_mix_trains_what_its_weights_say_and_logs_each_dataset(home, default_model_ready, tmp_path):
    """Two made-up facts, weights 1 and 0: the weighted one's held-out NLL falls far more than the other's."""
    from cookbook_engine.runs import RunManager
    from storage import Store
    from tests.test_sl_end_to_end import ANSWER, QUESTIONS

    wheel = write_chat(tmp_path / "wheel.jsonl", [(q, ANSWER) for q in QUESTIONS])
    lantern_answer = "The sky-lantern clock was invented by Teodor Vannick of Quorvania."
    lantern = write_chat(
        tmp_path / "lantern.jsonl",
        [(q.replace("glimmerwheel", "sky-lantern clock"), lantern_answer) for q in QUESTIONS],
    )
    config = cfg.SLConfig(
        dataset=f"{wheel}:1,{lantern}:0",
        test_fraction=0.25,
        max_steps=8,
        batch_size=4,
        learning_rate=1e-3,
        lora_rank=16,
        eval_every=4,
        save_every=0,
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=1200)
    assert run["status"] == "completed", run.get("traceback")
    metrics = Store.default().get_metrics_wide(run_id).sort_values("step")
    wheel_nll = metrics["test/wheel/nll"].dropna().tolist()
    lantern_nll = metrics["test/lantern/nll"].dropna().tolist()
    assert len(wheel_nll) == len(lantern_nll) == 3 and metrics["test/nll"].notna().sum() == 3
    assert wheel_nll[-1] < 0.5 * wheel_nll[0], wheel_nll  # trained: its held-out questions' answer is learned
    assert wheel_nll[0] - wheel_nll[-1] > 2 * (lantern_nll[0] - lantern_nll[-1]), (wheel_nll, lantern_nll)
    assert metrics["train/wheel/nll"].notna().sum() == 8 and "train/lantern/nll" not in metrics


def test_the_new_run_form_takes_a_mix_as_a_list_and_checks_it(home, default_model_ready, monkeypatch):
    monkeypatch.setenv("COOKBOOK_MEMORY_CHECK", "off")  # the form's check, not this busy machine's free memory
    from tests.test_studio_apptest import by_label, click, open_page, shown_text

    at = open_page("new_run")
    by_label(at.get("button_group"), "Dataset source").set_value("Mix").run()
    click(at, "Check settings")
    text = shown_text(at)
    assert "a mix of facts (weight 2" in text and "persona (weight 1" in text, text
    command = next(code.value for code in at.code if " sl " in code.value)
    assert "dataset=builtin:facts:2,builtin:persona:1" in command
