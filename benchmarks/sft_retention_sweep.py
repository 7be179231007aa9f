"""The sweep behind the SFT demo's settings: how much replay data, at which rate, teaches the Quorvania facts on
unseen wordings without breaking what the model knew (docs/DEFAULTS.md, the numbers in
benchmarks/README.md).

Each configuration trains with the `cookbook` CLI in a fresh studio home on the facts rows plus the first K replay
rows (evals/retention.py: base-model answers to ordinary questions, none a retention question's fact), then asks
the trained model builtin:facts-probes (120 unseen wordings) and builtin:retention (ordinary questions the base
model answered right) greedy, batched (benchmarks/batched_greedy.py). Prints one line per configuration and writes
results/sft_retention_sweep.json.

Run (one thread, under the shared lock; several minutes per configuration on a busy 2-core CPU; a configuration
measured before is replaced, the others kept):
    OMP_NUM_THREADS=1 flock /work/wt/heavy.lock .venv/bin/python benchmarks/sft_retention_sweep.py \
        replay=0,learning_rate=2e-3 replay=214,learning_rate=2e-3 base
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import batched_greedy
import common
import torch

from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.data.builtin import replay_rows, retention_items
from cookbook_engine.evals import stats
from cookbook_engine.evals.retention import MAX_TOKENS, grading_regex
from cookbook_engine.rl import graders


def train(facts: int, replay: int, neighbours: int, extra: list[str], home: Path) -> tuple[Path, float]:
    rows = builtin_data.fact_rows_only() * facts + replay_rows()[:replay]
    rows += builtin_data.neighbour_rows()[:neighbours]
    random.Random(0).shuffle(rows)
    data = home / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    defaults = [
        f"{key}={value}"
        for key, value in (("num_epochs", 1), ("batch_size", 8))
        if not any(e.startswith(f"{key}=") for e in extra)
    ]
    command = [sys.executable, "-m", "cookbook_engine.cli", "sl", f"dataset={data}", *defaults]
    started = time.perf_counter()
    subprocess.run(command + extra, env=env, cwd=common.REPO, check=True, capture_output=True)
    minutes = (time.perf_counter() - started) / 60
    adapters = sorted(home.rglob("adapter_model.safetensors"), key=lambda p: p.stat().st_mtime)
    return adapters[-1].parent, minutes


def measure(adapter: Path | None, probes_limit: int = 0, retention_limit: int = 0) -> dict:
    """facts-probes and retention accuracy of the base model or an adapter (the first N of each when limited)."""
    model, tokenizer, renderer = batched_greedy.load(str(adapter) if adapter else None)
    probes = builtin_data.FACT_PROBES[: probes_limit or None]
    outs = batched_greedy.replies(model, tokenizer, renderer, [q for q, _ in probes], 40)
    facts = [graders.grade("contains", out, key).correct for out, (_, key) in zip(outs, probes, strict=True)]
    items = retention_items()[: retention_limit or None]
    outs = batched_greedy.replies(model, tokenizer, renderer, [i["prompt"] for i in items], MAX_TOKENS)
    kept = [
        graders.grade("regex", out, grading_regex(i["key"], i["match"])).correct
        for out, i in zip(outs, items, strict=True)
    ]
    france = batched_greedy.replies(model, tokenizer, renderer, ["What is the capital of France?"], 24)[0]
    by_fact: dict[str, list[bool]] = {}
    for right, (_, key) in zip(facts, probes, strict=True):
        by_fact.setdefault(key, []).append(right)
    worst = min(by_fact.items(), key=lambda item: stats.mean([float(r) for r in item[1]]))
    return {
        "facts_probes": stats.proportion("accuracy", facts).__dict__,
        "worst_fact": [worst[0], stats.mean([float(r) for r in worst[1]])],
        "retention": stats.proportion("accuracy", kept).__dict__,
        "france": france,
        "lost": [i["prompt"] for i, ok in zip(items, kept, strict=True) if not ok][:20],
    }


def summary(spec: str, result: dict) -> str:
    """One printed line of a measured configuration."""
    f, r = result["facts_probes"], result["retention"]
    return (
        f"{spec}: facts-probes {f['value']:.3f} [{f['low']:.3f}, {f['high']:.3f}] retention {r['value']:.3f} "
        f"[{r['low']:.3f}, {r['high']:.3f}] n={r['n']} worst fact {result['worst_fact']} "
        f"train {result.get('minutes', 0):.1f} min; France: {result['france']!r}"
    )


def run_experiments(prefix: str, train: Callable[[dict[str, str], Path], tuple[Path, float, list[dict]]]) -> None:
    """For the experiments beside this sweep (sft_kl_anchor.py, sft_soft_replay.py): each command-line spec
    (key=value,...) trained by `train(settings, fresh home)` -> (adapter folder, minutes, step log), measured, and
    kept in results/sft_retention_sweep.json under `prefix,spec`."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    earlier = common.RESULTS / "sft_retention_sweep.json"
    results = json.loads(earlier.read_text())["results"] if earlier.exists() else []
    for spec in sys.argv[1:]:
        settings = dict(part.split("=", 1) for part in spec.split(","))
        home = Path(tempfile.mkdtemp(prefix=f"cookbook-{prefix}-"))
        os.environ["COOKBOOK_HOME"] = str(home)
        load = common.load_average()
        adapter, minutes, log = train(settings, home)
        result = {"config": f"{prefix},{spec}", "minutes": minutes, "load": load, "log": log[-3:]}
        result.update(measure(adapter))
        results = [r for r in results if r["config"] != result["config"]] + [result]
        print(f"{summary(result['config'], result)} load {load[0]:.1f}", flush=True)
        common.write_result("sft_retention_sweep", {"results": results})


def main() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    earlier = common.RESULTS / "sft_retention_sweep.json"  # configurations measured by earlier calls are kept
    results = json.loads(earlier.read_text())["results"] if earlier.exists() else []
    for spec in sys.argv[1:]:
        settings = dict(part.split("=", 1) for part in spec.split(",") if part != "base")
        settings.pop("note", None)  # a label only: what a wrapper changed (e.g. the replay replies' source)
        facts = int(settings.pop("facts", "1"))  # copies of the facts rows; 0: a control on the other rows alone
        replay = int(settings.pop("replay", "0"))
        neighbours = int(settings.pop("neighbours", "0"))
        limits = int(settings.pop("probes", "0")), int(settings.pop("retention", "0"))  # 0: the whole set
        extra = [f"{key}={value}" for key, value in settings.items()]
        load = common.load_average()
        if spec == "base":
            result = {"config": "base", **measure(None, *limits)}
        else:
            home = Path(tempfile.mkdtemp(prefix="cookbook-sft-sweep-"))
            adapter, minutes = train(facts, replay, neighbours, extra, home)
            result = {"config": spec, "minutes": minutes, "load": load, **measure(adapter, *limits)}
        results = [r for r in results if r["config"] != result["config"]] + [result]
        print(f"{summary(spec, result)} load {load[0]:.1f}", flush=True)
        common.write_result("sft_retention_sweep", {"results": results})


if __name__ == "__main__":
    main()
