"""An experiment for issue 23 (item 2): DPO on contrast twins (benchmarks/dpo_contrast_data.py), pairs whose
answers are each chosen as often as rejected, so that no answer-side heuristic earns the preference and only reading
the question can. Three earlier data sets did not lift `builtin:prefs-unseen-kinds` (benchmarks/README.md): 26 more
kinds of one-sided pairs made it worse (0.642 -> 0.583), the model learning "the bigger number" and "the word's first
letter" as heuristics.

Runs `cookbook dpo` with the default settings on the data (with or without `builtin:concise-prefs`, the default's
data) in a fresh studio home, then `cookbook eval models=base,RUN` on the unseen kinds, the default's own kinds and
retention; prints accuracy per unseen kind and appends to results/dpo_contrast_kinds.json.

Run (alone; about 15 minutes on a 2-core CPU):
    .venv/bin/python benchmarks/dpo_contrast_kinds.py [--with-default-data] [--per-kind 12] [--seed 0] [--home DIR]
        [--only-data] [cookbook dpo settings...]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import tempfile
import time
from pathlib import Path

import common
from dpo_contrast_data import contrast_pairs

from cookbook_engine.data import builtin as builtin_data, pref_kinds
from cookbook_engine.evals.retention import retention_of_job

RESULTS = common.RESULTS / "dpo_contrast_kinds.json"
EVALS = ("builtin:prefs-unseen-kinds", "builtin:prefs-style-controlled", "builtin:retention")


def per_unseen_kind(examples) -> dict[str, dict[str, str]]:
    kind_of = {p.prompt: p.kind for p in pref_kinds.unseen_kind_pairs()}
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for _, row in examples.iterrows():
        kind = kind_of[row["prompt"]]
        counts[kind][(row["model"], "n")] += 1
        counts[kind][(row["model"], "right")] += int(bool(row["correct"]))
    models = sorted({m for m, _ in next(iter(counts.values()))})
    return {kind: {m: f"{c[(m, 'right')]}/{c[(m, 'n')]}" for m in models} for kind, c in sorted(counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-kind", type=int, default=12, help="twin pairs per kind (x5 for the comparisons)")
    parser.add_argument("--with-default-data", action="store_true", help="add builtin:concise-prefs' pairs")
    parser.add_argument("--only-data", action="store_true", help="write the pairs to stdout as JSONL and stop")
    parser.add_argument("--seed", type=int, default=0, help="the pairs' draw (items, order)")
    parser.add_argument("--home", help="a studio home to reuse (its base-model results are reused), else a new one")
    parser.add_argument("settings", nargs="*", help="extra `cookbook dpo` settings, e.g. learning_rate=2e-4")
    args = parser.parse_args()
    pairs = contrast_pairs(args.per_kind, args.seed)
    rows = [p.row() for p in pairs]
    if args.with_default_data:
        rows += builtin_data.concise_prefs_rows()
        random.Random(1).shuffle(rows)
    if args.only_data:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"{len(pairs)} contrast pairs ({collections.Counter(p.kind for p in pairs)}), {len(rows)} rows in all")
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="dpo-contrast-"))
    name = f"contrast-{time.strftime('%H%M%S')}"
    data = home / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    load_start = list(os.getloadavg())
    started = time.perf_counter()
    common.cookbook(["dpo", f"dataset={data}", f"name={name}", *args.settings], home)
    minutes = (time.perf_counter() - started) / 60
    runs = json.loads(common.cookbook(["runs", "--json"], home).stdout)
    run_id = next(run["run_id"] for run in runs if run["name"] == name)
    print(f"trained {run_id} in {minutes:.1f} min; evaluating")
    metrics = json.loads(
        common.cookbook(["eval", f"models=base,{run_id}", "evals=" + ",".join(EVALS), "--json"], home).stdout
    )
    os.environ["COOKBOOK_HOME"] = str(home)
    from storage.evals import EvalStore

    store = EvalStore()
    eval_id = store.list_jobs()[0]["eval_id"]
    accuracy = {}  # "eval set base|trained": [value, low, high]
    for m in metrics:
        if m["metric"] == "accuracy":
            side = "base" if m["model"] == "base" else "trained"
            accuracy[f"{m['eval_set']} {side}"] = [round(m[k], 3) for k in ("value", "low", "high")]
    kinds = per_unseen_kind(store.examples(eval_id, EVALS[0]))
    retention = retention_of_job(store.examples(eval_id, EVALS[2]))
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": common.machine(),
        "load_start": load_start,
        "per_kind": args.per_kind,
        "seed": args.seed,
        "with_default_data": args.with_default_data,
        "settings": args.settings,
        "pairs": len(rows),
        "train_minutes": round(minutes, 2),
        "accuracy": accuracy,
        "unseen_by_kind": kinds,
        "retention": retention,
    }
    common.print_and_append(RESULTS, result)


if __name__ == "__main__":
    main()
