"""The studio's Evaluate page under AppTest: stored results read as a leaderboard with intervals and the best
model marked, every model's answers beside the reference, the disagreements between two models, and an evaluation
started from the form on the real default model that runs to its leaderboard; a checkpoint's lineage, and its
"Start DPO" button opening the New run form started from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.widgets import safe_markdown as literal  # how the page writes text into markdown: escaped
from cookbook_engine.evals import evaluators, jobs, stats, targets
from storage.evals import EvalStore

MAIN = Path(__file__).resolve().parent.parent / "app" / "main.py"
pytestmark = pytest.mark.slow


def open_page(page: str, **query) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.query_params.update(query)
    at.switch_page(f"../pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def press(at: AppTest, label: str, query_key: str, which: int = 0) -> str:
    """Click the button (the `which`-th so labelled) and return the id the page put in the URL (query parameter
    `query_key`)."""
    button = [b for b in at.button if b.label == label][which]
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    value = at.query_params[query_key]
    return value[0] if isinstance(value, list) else value


def stored_result(store: EvalStore, eval_id: str, target: targets.ModelTarget, correct: list[bool]) -> None:
    rows = [
        evaluators.ExampleRow(i, f"question {i}", "Lunthaven", "Lunthaven" if ok else "Paris", float(ok), ok)
        for i, ok in enumerate(correct)
    ]
    result = evaluators.EvalResult(
        "builtin:facts-probes", "generation", [stats.proportion("accuracy", correct)], rows, 1.0
    )
    jobs.save(store, eval_id, target, f"key-{target.label}", result)


def sft_run() -> targets.ModelTarget:
    """A finished SL run with a final checkpoint, as storage records one."""
    from cookbook_engine import models
    from storage import Store

    runs = Store.default()
    runs.create_run(
        "sl-1",
        name="facts-sft",
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config={"renderer": "auto"},
        log_dir="/tmp/sl-1",
        status="completed",
    )
    runs.add_checkpoint(
        "sl-1",
        step=20,
        name="final",
        kind="both",
        state_path="/ckpt/state",
        sampler_path="/ckpt/sampler",
        loop_state={"final": True},
    )
    return targets.ModelTarget("sl-1", "sft", models.DEFAULT_MODEL, "/ckpt/sampler", "sl-1", 20)


def test_evaluate_page_shows_leaderboard_answers_and_disagreements(home, default_model_ready):
    store = EvalStore()
    store.create_job(
        "eval-demo", name="demo", models=["base", "sft"], eval_sets=["builtin:facts-probes"], settings={}, total=8
    )
    stored_result(store, "eval-demo", targets.ModelTarget("base", "base", "m"), [False, False, True, False])
    stored_result(store, "eval-demo", sft_run(), [True, True, True, False])
    store.update_job("eval-demo", status="completed", done=8)

    at = open_page("evaluate", eval="eval-demo")
    board = at.dataframe[0].value.set_index("model")
    assert board.loc["sft", "facts-probes · accuracy"] == "★ 0.750 [0.301, 0.954]"
    assert board.loc["base", "facts-probes · accuracy"] == "0.250 [0.046, 0.699]"
    answers = at.dataframe[1].value
    assert answers["reference"].tolist() == ["Lunthaven"] * 4
    assert answers["sft · output"].tolist() == ["Lunthaven", "Lunthaven", "Lunthaven", "Paris"]

    [toggle] = [t for t in at.toggle if t.label == "Only examples where two models disagree"]
    toggle.set_value(True).run()
    differing = at.dataframe[1].value
    assert differing["idx"].tolist() == [0, 1] and differing["sft"].tolist() == ["Lunthaven", "Lunthaven"]
    assert any("2 of 4 examples differ between base and sft" in c.value for c in at.caption)

    assert any(literal("SmolLM2-135M-Instruct → SFT facts-sft (from base)") in m.value for m in at.markdown)
    [dpo] = [b for b in at.button if b.label == "Start DPO"]
    dpo.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["new_run_base"]["config"]["start_checkpoint"] == "/ckpt/state"
    [start] = [s for s in at.selectbox if s.label == "Start from checkpoint"]
    assert start.value == "/ckpt/state"  # the New run form opened as DPO from the checkpoint


def test_an_evaluation_started_from_the_form_reaches_the_leaderboard(home, default_model_ready):
    at = open_page("evaluate")
    [examples] = [n for n in at.number_input if n.label == "Examples per set (0 = all)"]
    examples.set_value(2)
    eval_id = press(at, "Evaluate", "eval")
    job = jobs.get_eval_manager().wait(eval_id, timeout=600)
    assert job["status"] == "completed", job.get("error")
    at.run()
    board = at.dataframe[0].value
    assert board["model"].tolist() == ["base"]
    assert board["facts-probes · accuracy"].iloc[0].startswith("0.000 [0.000, ")  # the base model knows no facts


def test_sweeps_page_refuses_a_bad_member_and_shows_a_sweeps_table(home, default_model_ready):
    at = open_page("sweeps")
    at.text_area[0].set_value("grid: {lora_rank: [8, 0]}\nevals: [builtin:facts-nll]")
    [_, start] = [b for b in at.button if b.label == "Start sweep"]  # the form's, then the YAML tab's
    start.click().run()
    shown = [str(e.value) for kind in ("markdown", "error", "caption") for e in getattr(at, kind)]
    assert literal("sweep, member 1: lora_rank=0: must be at least 1") in shown
    from storage.evals import EvalStore as Sweeps

    store = Sweeps()
    members = [{"kind": "sl", "settings": {"kind": "sl", "learning_rate": lr}, "config": {}} for lr in (1e-4, 1e-3)]
    store.create_sweep("sweep-demo", name="rates", spec={"evals": ["builtin:facts-probes"]}, members=members)
    target = sft_run()
    store.create_job(
        "eval-member",
        name="rates · 1",
        models=["sl-1"],
        eval_sets=["builtin:facts-probes"],
        settings={},
        total=4,
        sweep_id="sweep-demo",
    )
    stored_result(store, "eval-member", target, [True, True, True, False])
    store.update_job("eval-member", status="completed")
    store.update_member("sweep-demo", 0, status="failed", error="DatasetError: missing.jsonl: no such file")
    store.update_member("sweep-demo", 1, status="completed", run_id="sl-1", eval_id="eval-member")
    store.update_sweep("sweep-demo", status="completed")

    at = open_page("sweeps", sweep="sweep-demo")
    table = at.dataframe[-1].value
    assert table["learning_rate"].tolist() == ["0.0001", "0.001"]  # text: one type per column
    assert table["status"].tolist() == ["failed", "completed"]
    assert table["facts-probes · accuracy"].tolist() == ["", "0.750 [0.301, 0.954]"]
    assert "missing.jsonl" in table["error"].iloc[0]


def test_a_sweep_of_three_configurations_started_from_the_page_ends_in_its_table(home, default_model_ready):
    from cookbook_engine.evals import sweeps

    at = open_page("sweeps")
    at.text_area[0].set_value(
        "name: three\nkind: sl\n"
        "base: {max_steps: 1, batch_size: 2, lora_rank: 4, max_examples: 8, save_every: 0, eval_every: 0}\n"
        "grid: {learning_rate: [1.0e-4, 1.0e-3, 3.0e-3]}\n"
        "evals: [builtin:facts-nll]\nmax_examples: 2\ninclude_base: false\n"
    )
    sweep_id = press(at, "Start sweep", "sweep", which=1)  # the YAML tab's
    sweep = sweeps.get_sweep_runner().wait(sweep_id, timeout=900)
    assert sweep["status"] == "completed", sweep.get("error")
    at.run()
    table = at.dataframe[-1].value
    assert table["learning_rate"].tolist() == ["0.0001", "0.001", "0.003"]
    assert table["status"].tolist() == ["completed"] * 3
    assert all(text.startswith("train_mean_nll=") for text in table["training metric"])
    assert all(" [" in text for text in table["facts-nll · nll"])
