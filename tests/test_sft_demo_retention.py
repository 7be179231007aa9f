"""The SFT demo on the real default model, as `make demo` runs it, then `cookbook eval` as a user would: it must learn
its facts on wordings it never trained on and keep most of what the base model knew (`builtin:retention`). Slow: a
full epoch (84 steps: the facts twice and 292 replay rows) and two evaluations, several minutes on a 2-core CPU.

What it guards is the measured state, not issue 23's target: on 322 retention questions the demo keeps 0.910
[0.874, 0.937] (docs/DEFAULTS.md), beyond the interval of zero. The test fails if the demo stops learning its facts
or loses clearly more than measured (the first 100 questions: below
0.80, where the measured 0.910 would give about 0.9)."""

from __future__ import annotations

import json

import pytest

from cookbook_engine import cli
from cookbook_engine.evals.retention import retention_of_job
from storage import Store
from storage.evals import EvalStore

RETENTION_FIRST = 100


@pytest.mark.slow
def test_the_sft_demo_learns_its_facts_and_keeps_most_of_what_the_model_knew(home, default_model_ready, capsys):
    assert cli.main(["sl", "dataset=builtin:facts", "num_epochs=1", "batch_size=8", "learning_rate=2e-3"]) == 0
    run_id = Store.default().list_runs()[0]["run_id"]
    capsys.readouterr()
    evals = ["eval", f"models=base,{run_id}", "evals=builtin:facts-probes,builtin:retention"]
    assert cli.main([*evals, f"max_examples={RETENTION_FIRST}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    probes = next(r for r in rows if r["model"] != "base" and r["eval_set"] == "builtin:facts-probes")
    assert probes["metric"] == "accuracy" and probes["value"] >= 0.9, probes

    store = EvalStore()
    examples = store.examples(store.list_jobs()[0]["eval_id"], "builtin:retention")
    kept = retention_of_job(examples)
    print(f"SFT demo: facts-probes {probes['value']:.3f}; retention (first {RETENTION_FIRST}) {kept}")
    assert kept["base"] >= 0.95  # robust base answers: the evaluator's own path agrees with the set's builder
    assert kept["trained"] >= 0.80, kept
