"""Evaluation on the real default model: a short SL run on builtin:facts (39 of the README demo's 103 steps, at the
measured rate) beats the base model on the held-out facts probes by more than both intervals (`cookbook eval`,
per-example answers stored), the run's own `evals=` logged test/facts-nll/... at its end, and running the identical
evaluation again reuses the stored results instead of generating again."""

from __future__ import annotations

import pytest

from cookbook_engine.cli import main
from cookbook_engine.config import SLConfig
from cookbook_engine.runs import RunManager
from storage import Store
from storage.evals import EvalStore

pytestmark = pytest.mark.slow


SHORT_STEPS = 39  # the facts about 1.5 times (the demo's epoch: 103 steps, suggested.MEASURED), at the measured rate
PROBES = 12  # the first 12 probes ask each fact once, in a wording never trained on


def test_sft_on_facts_beats_the_base_model_on_the_held_out_probes(home, default_model_ready, capsys):
    manager = RunManager()
    run_id = manager.start(
        SLConfig(dataset="builtin:facts", max_steps=SHORT_STEPS, eval_every=0, save_every=0, evals="builtin:facts-nll")
    )
    run = manager.wait(run_id, timeout=900)
    assert run["status"] == "completed", run.get("traceback")
    logged = Store.default().get_metrics(run_id, ["test/facts-nll/nll"])
    assert logged["step"].tolist() == [SHORT_STEPS] and logged["value"].iloc[0] < 1.0  # the facts are learned

    assert main(["eval", f"models=base,{run_id}", "evals=builtin:facts-probes", f"max_examples={PROBES}"]) == 0
    printed = capsys.readouterr().out
    store = EvalStore()
    [job] = store.list_jobs()
    metrics = store.metrics([job["eval_id"]]).set_index("model")
    base, trained = metrics.loc["base"], metrics.loc[f"{run_id}@{SHORT_STEPS}"]
    print(
        f"facts-probes accuracy: base {base['value']:.3f} [{base['low']:.3f}, {base['high']:.3f}], SFT "
        f"{trained['value']:.3f} [{trained['low']:.3f}, {trained['high']:.3f}] (n={PROBES})"
    )
    assert trained["low"] > base["high"]  # better by more than both intervals
    examples = store.examples(job["eval_id"])
    assert len(examples) == 2 * PROBES and examples["output"].str.len().gt(0).all()
    assert "★" in printed and "facts-probes · accuracy" in printed

    assert main(["eval", f"models=base,{run_id}", "evals=builtin:facts-probes", f"max_examples={PROBES}"]) == 0
    again = store.list_jobs()[0]
    assert {row["reused_from"] for row in store.results([again["eval_id"]])} == {job["eval_id"]}
    assert store.metrics([again["eval_id"]])["value"].tolist() == store.metrics([job["eval_id"]])["value"].tolist()
