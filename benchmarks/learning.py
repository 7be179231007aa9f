"""The learning report: do the three built-in default runs teach, on held-out questions, within minutes?

What it does: runs each default exactly as a new user would (the `cookbook` CLI in a fresh studio home, so the wall
time includes loading the model), then `cookbook eval models=base,RUN_ID` on its held-out target set and on
builtin:retention (ordinary questions the base model answers right, evals/retention.py), and prints one table: base
and trained accuracy on the target with their 95% intervals, the retention loss (base minus trained, on the same
questions) with its paired bootstrap interval, the training minutes, the target and whether it is met. A default
meets its target only when the retention loss's interval contains zero. The SFT row also reports the worst fact (the
share of that fact's unseen wordings answered right), since its target is per fact. Not a timed test: the minutes
depend on the machine and its load (recorded with the results).

The table also replaces the one between the `learning-table` markers in benchmarks/README.md (with the date, the
machine and the load), so the README shows the latest full run; `--only` runs leave the README and
results/learning.json alone and write results/learning-<parts>.json (e.g. learning-rl.json).

Run: .venv/bin/python benchmarks/learning.py [--only sft,dpo,rl]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import common

from cookbook_engine.evals.retention import retention_of_job

RETENTION = "builtin:retention"
RL_TARGET_LOW = 0.6  # the RL target's interval: its low end on the fresh sums must reach this too


@dataclass(frozen=True)
class Default:
    key: str
    what: str
    command: list[str]  # the cookbook arguments of the default run
    eval_set: str
    target: float  # accuracy on the eval set (per fact for SFT)
    target_text: str
    minutes_budget: float
    unseen: tuple[str, ...] = ()  # sets of kinds or procedures the run never trained on (reported, no target)


DEFAULTS = (
    Default(
        "sft",
        "SFT demo (README quick start)",
        ["sl", "dataset=builtin:facts", "num_epochs=1", "batch_size=8", "learning_rate=1e-3", "lora_rank=8"],
        "builtin:facts-probes",
        0.9,
        ">= 0.9 of unseen wordings, every fact; retention loss interval contains 0",
        1.5,
    ),
    Default(
        "dpo",
        "DPO default",
        ["dpo", "dataset=builtin:concise-prefs"],
        "builtin:prefs-style-controlled",
        0.85,
        ">= 0.85, above base outside both intervals; retention loss interval contains 0",
        10.0,
        ("builtin:prefs-unseen-kinds",),
    ),
    Default(
        "rl",
        "RL default",
        ["rl", "env=arithmetic"],
        "builtin:arithmetic-fresh",
        0.7,
        ">= 0.7 greedy with the interval's low end >= 0.6, within 10 min; retention loss interval contains 0",
        10.0,
        ("builtin:arithmetic", "builtin:arithmetic-subtraction", "builtin:arithmetic-three-digit"),
    ),
)


def train(default: Default, home: Path) -> tuple[str, float]:
    """Run the default; returns its run id and wall minutes."""
    started = time.perf_counter()
    common.cookbook(default.command + [f"name=learning-{default.key}"], home)
    minutes = (time.perf_counter() - started) / 60
    runs = json.loads(common.cookbook(["runs", "--json"], home).stdout)
    run = next(r for r in runs if r["name"] == f"learning-{default.key}")
    return run["run_id"], minutes


def evaluate(run_id: str, default: Default, home: Path) -> dict[str, dict]:
    """{"base": {...}, "trained": {...}, "unseen": {set: {"base": .., "trained": ..}}, "retention": {...}}: the
    target set's accuracy, its interval and the per-example outcomes by reference, the unseen sets' accuracies, and
    the retention set's accuracies and loss (retention_loss)."""
    eval_set = default.eval_set
    evals = "evals=" + ",".join([eval_set, *default.unseen, RETENTION])
    rows = json.loads(common.cookbook(["eval", f"models=base,{run_id}", evals, "--json"], home).stdout)
    os.environ["COOKBOOK_HOME"] = str(home)
    from storage.evals import EvalStore

    store = EvalStore()
    eval_id = store.list_jobs()[0]["eval_id"]
    examples = store.examples(eval_id, eval_set)
    found: dict[str, dict] = {"unseen": {}}
    for row in rows:
        side = "base" if row["model"] == "base" else "trained"
        if row["metric"] == "accuracy" and row["eval_set"] in default.unseen:
            found["unseen"].setdefault(row["eval_set"], {})[side] = {k: row[k] for k in ("value", "low", "high", "n")}
        if row["metric"] != "accuracy" or row["eval_set"] != eval_set:
            continue
        mine = examples[examples["model"] == row["model"]]
        found[side] = {
            "accuracy": row["value"],
            "low": row["low"],
            "high": row["high"],
            "n": row["n"],
            "by_reference": mine.groupby("reference")["correct"].mean().to_dict(),
        }
    found["retention"] = retention_of_job(store.examples(eval_id, RETENTION))
    return found


def met(default: Default, result: dict) -> bool:
    base, trained = result["base"], result["trained"]
    if not result["retention"]["kept"]:
        return False
    if default.key == "sft":
        return min(trained["by_reference"].values()) >= default.target
    if default.key == "dpo":
        return trained["accuracy"] >= default.target and trained["low"] > base["high"]
    return (
        trained["accuracy"] >= default.target
        and trained["low"] >= RL_TARGET_LOW
        and result["minutes"] <= default.minutes_budget
    )


README = common.REPO / "benchmarks" / "README.md"
TABLE_START, TABLE_END = "<!-- learning-table:start -->", "<!-- learning-table:end -->"


def markdown_table(header: list[str], rows: list[list[str]], machine: dict, load_start: list[float]) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine['cpu']} ({machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, torch {machine['torch']}), load average {load_start[0]:.1f} at the start, "
        "by `benchmarks/learning.py` (`results/learning.json`):",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_readme_table(table: str) -> None:
    """Replace the table between the markers in benchmarks/README.md (the markers must be there)."""
    text = README.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    README.write_text(text[:start] + "\n" + table + "\n" + text[end:])
    print(f"wrote the table into {README.relative_to(common.REPO)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="sft,dpo,rl")
    args = parser.parse_args()
    selected = [default.key for default in DEFAULTS if default.key in args.only.split(",")]
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(common.REPO / ".test-cache" / "models"))  # shared with tests
    payload: dict = {"load_average_start": common.load_average()}
    rows = []
    for default in DEFAULTS:
        if default.key not in selected:
            continue
        home = Path(tempfile.mkdtemp(prefix=f"cookbook-learning-{default.key}-"))
        load = common.load_average()
        run_id, minutes = train(default, home)
        result = {
            "run_id": run_id,
            "minutes": minutes,
            "load_average_at_start": load,
            "command": "cookbook " + " ".join(default.command),
            **evaluate(run_id, default, home),
        }
        result["met"] = met(default, result)
        payload[default.key] = result
        base, trained, kept = result["base"], result["trained"], result["retention"]
        worst = min(trained["by_reference"].items(), key=lambda item: item[1])
        rows.append(
            [
                default.what,
                f"`{result['command']}`",
                default.eval_set,
                f"{base['accuracy']:.2f} [{base['low']:.2f}, {base['high']:.2f}]",
                f"{trained['accuracy']:.2f} [{trained['low']:.2f}, {trained['high']:.2f}]"
                + (f"; worst fact {worst[1]:.2f} ({worst[0]})" if default.key == "sft" else ""),
                "; ".join(
                    f"{name.removeprefix('builtin:')} {pair['base']['value']:.2f} [{pair['base']['low']:.2f}, "
                    f"{pair['base']['high']:.2f}] -> {pair['trained']['value']:.2f} [{pair['trained']['low']:.2f}, "
                    f"{pair['trained']['high']:.2f}]"
                    for name, pair in result["unseen"].items()
                )
                or "-",
                f"{kept['base']:.2f} -> {kept['trained']:.2f}, loss {kept['loss']:+.3f} [{kept['low']:+.3f}, "
                f"{kept['high']:+.3f}] (n={kept['n']})",
                f"{minutes:.1f}",
                f"{load[0]:.1f}",
                default.target_text,
                "yes" if result["met"] else "NO",
            ]
        )
        print(rows[-1], flush=True)
    header = [
        "default",
        "command",
        "target set",
        "base",
        "trained",
        "unseen sets: base -> trained",
        f"retention ({RETENTION}): base -> trained, loss",
        "train min (wall)",
        "load at start",
        "target",
        "met",
    ]
    common.print_table("Built-in defaults: held-out accuracy before and after (95% intervals)", header, rows)
    if len(selected) == len(DEFAULTS):
        common.write_result("learning", payload)
        write_readme_table(markdown_table(header, rows, common.machine(), payload["load_average_start"]))
    else:  # a part of the report: its own file, so the last full report's results stay whole
        common.write_result("learning-" + "-".join(selected), payload)


if __name__ == "__main__":
    main()
