"""The SFT demo on the real default model, as `make demo` runs it, then `cookbook eval` as a user would: it must learn
its facts on wordings it never trained on and keep what the base model knew (`builtin:retention`). Slow: a full epoch
(103 steps: the facts four times, LoRA's A fixed away from ordinary chats by lora_a=auto) and two evaluations,
several minutes on a 2-core CPU.

Measured (docs/DEFAULTS.md, 2026-12-02, a 2-core Intel Xeon with AMX, bf16): on two data orders every fact at 9 or
10 of 10 unseen wordings, and of 322 retention answers 4 lost and 3 gained, 3 lost and 2 gained (lr 7e-4 and the facts
three times, the demo until then: the founding year 6 of 10, 7 lost). On a 2-core AMD EPYC in fp32 (2026-12-01, the
demo of then) with B decayed where ordinary chats read LoRA's fixed A, 1 and 1 lost among the first 100; without the
decay 4 and 4. The test fails if the demo stops learning its facts or loses more than 3 answers net on the first
100 (so it fails without the decay)."""

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
    demo = ["sl", "dataset=builtin:facts", "num_epochs=1", "batch_size=8", "learning_rate=1e-3", "lora_rank=8"]
    assert cli.main(demo) == 0
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
    assert kept["lost"] - kept["gained"] <= 3, kept
