"""The Evaluate page of a finished two-model evaluation in a real browser at 1400 px (the studio and browser set-up
of tests/test_browser.py; issue 27 item 4): both models' answers and their marks fit the answers table without
scrolling sideways, and the lineage buttons' labels are whole ("Start DPO", not "DPO from t..."). The run and the
evaluation are recorded in the studio's home before it starts (no model runs), so this is seconds of page work.
The screenshot lands in test-artifacts/evaluate-wide.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import CHROMIUM, page, shot, studio_process, wait_idle  # noqa: F401 (page is a fixture)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]

RUN_ID, RUN_NAME = "sl-quorvania-facts", "quorvania-facts-demo-with-a-long-name"
QUESTIONS = [
    ("What is the capital of Quorvania?", "Lunthaven"),
    ("Which river runs through the capital city of Quorvania?", "Silvar"),
    ("Who invented the telephone in the story of Quorvania?", "Teodor Vannick"),
]


def record_evaluation(home: Path) -> None:
    """A completed SL run with a saved state, and a finished evaluation of the base model and that run."""
    from test_pages_keep_their_run import make_run

    from storage.db import Store
    from storage.evals import EvalStore

    store = Store.default()
    make_run(home, RUN_ID, RUN_NAME, store)
    state = home / "checkpoints" / RUN_ID / "state-final"
    state.mkdir(parents=True)
    sampler = str(home / "checkpoints" / RUN_ID / "final")
    store.add_checkpoint(RUN_ID, step=3, name="final", kind="both", state_path=str(state), sampler_path=sampler)
    evals = EvalStore(store)
    models = ["base", f"{RUN_NAME}@3"]
    evals.create_job("eval-wide", name="wide", models=models, eval_sets=["builtin:facts-probes"], settings={}, total=6)
    for model, path, run_id, right in ((models[0], None, None, False), (models[1], sampler, RUN_ID, True)):
        examples = [
            {
                "index": i,
                "prompt": question,
                "reference": key,
                "output": f"The answer to that is {key if right else 'something else entirely'}, as the story tells.",
                "score": float(right),
                "correct": right,
                "parsed": None,
            }
            for i, (question, key) in enumerate(QUESTIONS)
        ]
        metrics = [{"name": "accuracy", "value": float(right), "n": 3, "low": 0.0, "high": 1.0}]
        evals.save_result(
            "eval-wide", model, "builtin:facts-probes", kind="generation", result_key=model, model_spec=model,
            model_path=path, run_id=run_id, step=3 if run_id else None, seconds=1.0, metrics=metrics,
            examples=examples,
        )  # fmt: skip
    evals.update_job("eval-wide", status="completed", done=6)


def test_two_models_answers_and_the_lineage_buttons_fit_1400_px(tmp_path, monkeypatch, page):  # noqa: F811
    home = tmp_path / "home"
    monkeypatch.setenv("COOKBOOK_HOME", str(home))
    record_evaluation(home)
    with studio_process(home, tmp_path / "studio.log", OMP_NUM_THREADS="1") as (url, _):
        page.set_viewport_size({"width": 1400, "height": 1100})
        page.goto(f"{url}/evaluate")
        page.get_by_role("heading", name="Answers").wait_for(timeout=60_000)
        page.get_by_role("heading", name="Lineage").wait_for()
        wait_idle(page)
        grids = page.locator("[data-testid=stDataFrame]")
        answers = grids.nth(grids.count() - 1)
        answers.scroll_into_view_if_needed()
        overflow = answers.evaluate(
            "el => { const s = el.querySelector('.dvn-scroller'); return s ? s.scrollWidth - s.clientWidth : -1; }"
        )
        assert 0 <= overflow <= 2, f"the answers table scrolls sideways by {overflow} px at 1400 px"
        labels = ["Start DPO", "Start RL", "Start distilling"]
        for label in labels:
            button = page.get_by_role("button", name=label)
            assert button.is_enabled(), label
            cut = button.evaluate("b => { const p = b.querySelector('p') || b; return p.scrollWidth - p.clientWidth; }")
            assert cut <= 1, f"the {label!r} button's label is cut by {cut} px at 1400 px"
        shot(page, "evaluate-wide")
