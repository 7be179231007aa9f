"""DPO: pairs from every supported layout become datums scored on the reply only, bad input fails before a run
exists, and (slow) on the real default model a short run on builtin:concise-prefs makes the model prefer correct
answers on held-out pairs where style and length cannot tell (builtin:prefs-style-controlled) by more than the
intervals, loses no more on kinds it never trained (builtin:prefs-unseen-kinds) and keeps most ordinary answers
(builtin:retention) than measured, while a run started from an SL checkpoint records its parent and uses that
checkpoint as its reference."""

from __future__ import annotations

import json
import math
import time

import pytest

from cookbook_engine import models, renderers
from cookbook_engine.cli import main
from cookbook_engine.config import DPOConfig, SLConfig, parse_overrides
from cookbook_engine.data import loading as datasets
from cookbook_engine.dpo import data as dpo_data
from cookbook_engine.evals.retention import retention_of_job
from cookbook_engine.runs import RunManager, preflight
from cookbook_engine.training.learning_rate import learning_rate
from storage import Store
from storage.evals import EvalStore


@pytest.fixture(scope="module")
def renderer(default_model_ready):
    return renderers.get_renderer("auto", models.load_tokenizer(models.DEFAULT_MODEL))


def scored_text(renderer, datum) -> str:
    """The tokens the DPO loss sums over, decoded."""
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    return renderer.tokenizer.decode([int(t) for t, w in zip(targets, weights) if w > 0])


def write_jsonl(path, rows) -> str:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def test_pairs_in_common_layouts_are_scored_on_the_replies_only(renderer, tmp_path):
    hh_messages = {
        "chosen": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
        ],
        "rejected": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Lyon."},
        ],
    }
    prompt_text = {"prompt": "Capital of Italy?", "chosen": "Rome.", "rejected": "Milan, I think."}
    hh_text = {
        "chosen": "\n\nHuman: Capital of Spain?\n\nAssistant: Madrid.",
        "rejected": "\n\nHuman: Capital of Spain?\n\nAssistant: Seville.",
    }
    spec = write_jsonl(tmp_path / "pairs.jsonl", [hh_messages, prompt_text, hh_text])
    pairs, _ = datasets.load_preference_dataset(spec, test_fraction=0.0)
    rendered, truncated, dropped = dpo_data.render_pairs(pairs, renderer, max_length=512)
    assert (truncated, dropped) == (0, 0)
    scored = {scored_text(renderer, p.chosen): scored_text(renderer, p.rejected) for p in rendered}
    assert scored == {
        "Paris.<|im_end|>": "Lyon.<|im_end|>",
        "Rome.<|im_end|>": "Milan, I think.<|im_end|>",
        "Madrid.<|im_end|>": "Seville.<|im_end|>",
    }  # "Hello!" in the shared prompt is not scored


def test_pairs_too_long_for_max_length_are_truncated_or_dropped(renderer):
    long_reply = "word " * 200
    pairs = [
        datasets.PreferencePair(
            [{"role": "user", "content": "Say words."}],
            [{"role": "assistant", "content": long_reply}],
            [{"role": "assistant", "content": "No."}],
        ),
        datasets.PreferencePair(
            [{"role": "user", "content": "x " * 100}],
            [{"role": "assistant", "content": "Yes."}],
            [{"role": "assistant", "content": "No."}],
        ),
    ]
    rendered, truncated, dropped = dpo_data.render_pairs(pairs, renderer, max_length=64)
    assert (len(rendered), truncated, dropped) == (1, 1, 1)
    assert rendered[0].chosen.model_input.length == 63


def test_default_learning_rate_is_a_fraction_of_the_sl_rate():
    # data with no measured rate (tests/test_suggested.py covers the built-in's measured one)
    assert learning_rate(DPOConfig(dataset="pairs.jsonl")) == pytest.approx(2e-4)
    assert learning_rate(DPOConfig(learning_rate=5e-5)) == 5e-5


def test_bad_dpo_input_fails_before_a_run_exists(home, default_model_ready, tmp_path):
    rl_rows = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "q", "answer": "a"}])
    with pytest.raises(datasets.DatasetError, match="chosen"):
        preflight(parse_overrides("dpo", [f"dataset={rl_rows}"]))
    same = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "a"}])
    with pytest.raises(datasets.DatasetError, match="identical"):
        preflight(parse_overrides("dpo", [f"dataset={same}"]))
    long_prompt = write_jsonl(tmp_path / "c.jsonl", [{"prompt": "x " * 200, "chosen": "a", "rejected": "b"}] * 3)
    with pytest.raises(datasets.DatasetError, match="no pair fits max_length=32"):
        preflight(parse_overrides("dpo", [f"dataset={long_prompt}", "max_length=32"]))
    with pytest.raises(Exception, match="dpo_beta"):
        preflight(parse_overrides("dpo", ["dpo_beta=0"]))
    assert Store.default().list_runs() == []
    prepared = preflight(DPOConfig())
    train, test = datasets.load_preference_dataset("builtin:concise-prefs")  # the default 10% held out
    assert len(test) == round(0.1 * (len(train) + len(test)))
    assert f"{len(train)} training and {len(test)} held-out pairs" in prepared.summary()


def metric_by_step(store: Store, run_id: str, name: str) -> dict[int, float]:
    frame = store.get_metrics(run_id, [name])
    return dict(zip(frame["step"].tolist(), frame["value"].tolist()))


SHORT_STEPS = 14  # half the default run (one epoch of builtin:concise-prefs, suggested.MEASURED)
STYLE_EXAMPLES = 100  # the first 100 of builtin:prefs-style-controlled: every kind of question (its order is mixed)
# What the half-length default run keeps, as guards of the measured state, not issue 23's targets: on 2026-11-27
# (22:28) it kept 0.88 of the first 100 retention questions and read 0.630 -> 0.610 on the first 100 pairs of kinds
# it never trained (the full run: 0.642 -> 0.681 on 204; a run that learned a heuristic of its own kinds instead
# went 0.642 -> 0.583, docs/DEFAULTS.md).
DPO_SHORT_RETENTION = 0.8
DPO_SHORT_UNSEEN_SLACK = 0.05


@pytest.mark.slow
def test_short_default_dpo_run_prefers_correct_answers_when_style_cannot_tell(home, default_model_ready, capsys):
    """Half the default run, then `cookbook eval models=base,RUN`: on held-out pairs whose answers are the same sentence
    but for the answer, the trained model's strict accuracy is above the base model's by more than the intervals; on
    pairs of kinds it never trained it is no worse than the base model beyond a small slack, and it keeps at least
    DPO_SHORT_RETENTION of the first retention questions."""
    manager = RunManager()
    config = DPOConfig(max_steps=SHORT_STEPS, eval_every=SHORT_STEPS, save_every=0)  # the measured rate (auto)
    started = time.perf_counter()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=900)
    minutes = (time.perf_counter() - started) / 60
    assert run["status"] == "completed", run.get("traceback")
    store = Store.default()
    accuracy = metric_by_step(store, run_id, "test/accuracy")
    loss = metric_by_step(store, run_id, "test/dpo_loss")
    margin = metric_by_step(store, run_id, "test/margin")
    # policy = reference at step 0: each pair's log-ratio difference is rounding only (none in fp32; in bf16 the
    # policy's packed pass and the reference's sampler pass round apart by about 0.02 nat a pair, so some pairs count
    # as right or wrong by that much), hence the loss is log 2 and the margin about 0
    assert loss[0] == pytest.approx(math.log(2), abs=5e-3) and abs(margin[0]) < 0.01
    assert accuracy[SHORT_STEPS] > accuracy[0]
    assert loss[SHORT_STEPS] < 0.5
    frame = store.get_metrics_wide(run_id)
    for name in ("dpo_loss", "accuracy", "margin", "chosen_reward", "rejected_reward"):
        assert frame.dropna(subset=[name])["step"].tolist() == list(range(SHORT_STEPS)), name

    evals = "builtin:prefs-style-controlled,builtin:prefs-unseen-kinds,builtin:retention"
    assert main(["eval", f"models=base,{run_id}", f"evals={evals}", f"max_examples={STYLE_EXAMPLES}"]) == 0
    capsys.readouterr()
    [job] = EvalStore().list_jobs()
    metrics = EvalStore().metrics([job["eval_id"]])
    metrics = metrics[metrics["metric"] == "accuracy"]
    by_set = {name: frame.set_index("model") for name, frame in metrics.groupby("eval_set")}
    unseen = by_set["builtin:prefs-unseen-kinds"]["value"]
    examples = EvalStore().examples(job["eval_id"], "builtin:retention")
    kept = retention_of_job(examples)
    trained_name = f"{run_id}@{SHORT_STEPS}"
    print(
        f"DPO {SHORT_STEPS} steps: prefs-unseen-kinds {unseen['base']:.3f} -> {unseen[trained_name]:.3f}; "
        f"retention (first {STYLE_EXAMPLES}) {kept}"
    )
    # the measured state, not issue 23's targets (+10 points on unseen kinds, no retention loss): docs/DEFAULTS.md
    assert unseen[trained_name] >= unseen["base"] - DPO_SHORT_UNSEEN_SLACK
    assert kept["trained"] >= DPO_SHORT_RETENTION, kept
    metrics = by_set["builtin:prefs-style-controlled"]
    base, trained = metrics.loc["base"], metrics.loc[trained_name]
    print(
        f"DPO {SHORT_STEPS} steps in {minutes:.1f} min: prefs-style-controlled accuracy base {base['value']:.3f} "
        f"[{base['low']:.3f}, {base['high']:.3f}] -> {trained['value']:.3f} [{trained['low']:.3f}, "
        f"{trained['high']:.3f}] (n={STYLE_EXAMPLES})"
    )
    # better by more than the intervals: each score lies outside the other's interval (the full default run's are
    # apart altogether: docs/DEFAULTS.md)
    assert trained["low"] > base["value"] and trained["value"] > base["high"]


@pytest.mark.slow
def test_dpo_from_an_sl_checkpoint_records_its_parent_and_uses_it_as_reference(home, default_model_ready):
    manager = RunManager()
    sl_run = manager.start(
        SLConfig(
            dataset="builtin:persona",
            max_steps=3,
            batch_size=2,
            learning_rate=1e-3,
            lora_rank=8,
            eval_every=0,
            save_every=0,
        )
    )
    assert manager.wait(sl_run, timeout=600)["status"] == "completed"
    store = Store.default()
    checkpoint = store.last_checkpoint(sl_run)["state_path"]

    dpo_run = manager.start(
        DPOConfig(
            start_checkpoint=checkpoint, max_steps=2, eval_every=2, save_every=0, max_examples=40, test_fraction=0.2
        )
    )
    run = manager.wait(dpo_run, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    assert run["parent_run_id"] == sl_run and run["parent_checkpoint"] == checkpoint
    loss = metric_by_step(store, dpo_run, "test/dpo_loss")
    # at step 0 the policy is the checkpoint; with the checkpoint as reference the loss is log 2 and the margin about
    # 0 but for rounding (bf16: about 0.02 nat a pair between the packed training pass and the sampler's)
    assert loss[0] == pytest.approx(math.log(2), abs=5e-3)
    assert abs(metric_by_step(store, dpo_run, "test/margin")[0]) < 0.01
