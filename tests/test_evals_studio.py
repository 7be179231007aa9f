"""The studio's Evaluate page under AppTest: stored results read as a leaderboard with intervals and the best
model marked, every model's answers beside the reference, the disagreements between two models, and an evaluation
started from the form on the real default model that runs to its leaderboard."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cookbook_engine.evals import evaluators, jobs, stats, targets
from storage.evals import EvalStore

MAIN = Path(__file__).resolve().parent.parent / "app" / "main.py"
pytestmark = pytest.mark.slow


def open_evaluate(**query) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.query_params.update(query)
    at.switch_page("../pages/evaluate.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def stored_result(store: EvalStore, eval_id: str, model: str, correct: list[bool]) -> None:
    rows = [evaluators.ExampleRow(i, f"question {i}", "Lunthaven", "Lunthaven" if ok else "Paris", float(ok), ok)
            for i, ok in enumerate(correct)]
    result = evaluators.EvalResult("builtin:facts-probes", "generation", [stats.proportion("accuracy", correct)],
                                   rows, 1.0)
    jobs.save(store, eval_id, targets.ModelTarget(model, model, "m"), f"key-{model}", result)


def test_evaluate_page_shows_leaderboard_answers_and_disagreements(home, default_model_ready):
    store = EvalStore()
    store.create_job("eval-demo", name="demo", models=["base", "sft"], eval_sets=["builtin:facts-probes"],
                     settings={}, total=8)
    stored_result(store, "eval-demo", "base", [False, False, True, False])
    stored_result(store, "eval-demo", "sft", [True, True, True, False])
    store.update_job("eval-demo", status="completed", done=8)

    at = open_evaluate(eval="eval-demo")
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


def test_an_evaluation_started_from_the_form_reaches_the_leaderboard(home, default_model_ready):
    at = open_evaluate()
    [examples] = [n for n in at.number_input if n.label == "Examples per set (0 = all)"]
    examples.set_value(2)
    [button] = [b for b in at.button if b.label == "Evaluate"]
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    eval_id = at.query_params["eval"]
    eval_id = eval_id[0] if isinstance(eval_id, list) else eval_id
    job = jobs.get_eval_manager().wait(eval_id, timeout=600)
    assert job["status"] == "completed", job.get("error")
    at.run()
    board = at.dataframe[0].value
    assert board["model"].tolist() == ["base"]
    assert board["facts-probes · accuracy"].iloc[0].startswith("0.000 [0.000, ")  # the base model knows no facts
