"""Issue 23's RL retention measurement: `cookbook rl env=arithmetic` (the default: `lora_a=auto`, which is
`null_space` there, training/null_space.py) or the same with `lora_a=trained` (LoRA's A trained, the default before
2026-11-29), then `cookbook eval models=base,RUN` on fresh sums and `builtin:retention`, all in one process and a
fresh studio home. Reports fresh-sum accuracy, the retention loss with its paired interval, and how many ordinary
answers were lost and gained; for a null_space run also that A stayed where it was fixed.

Settings (key=value, comma-separated; one run per call): seed (0), lora_a (auto), keep_decay (B's decay where
ordinary chats read the fixed A, training/lora_a.py KEEP_DECAY; the engine's own value unless set), base (skip: the
base model is not asked again, as in benchmarks/null_space_loops.py), and any other `cookbook rl` setting as
rl.KEY=VALUE. Appends to results/rl_null_space.json. Run (alone; about 13 minutes each on a 2-core CPU):
    ../.venv/bin/python rl_null_space.py seed=1
    ../.venv/bin/python rl_null_space.py seed=1,lora_a=trained

The first measurements (2026-11-29 03:40-05:15, entries with "path": "patched") ran an earlier form of this script
that patched the local backend from outside to fix A; their directions equal the engine's to the bit (checked against
the seed-0 run's saved A).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common

RESULTS = common.RESULTS / "rl_null_space.json"
EVALS = ("builtin:arithmetic-fresh", "builtin:retention")


def a_moved(home: Path, config) -> float:
    """How far the run's last saved A matrices are from the directions lora_a=null_space fixes (0: not at all)."""
    from cookbook_engine.backends import compat, local
    from cookbook_engine.rl import arithmetic
    from cookbook_engine.training import null_space
    from cookbook_engine.training.lora_a import rank_used

    directions = null_space.directions_for(
        config.model, arithmetic.null_space_task_chats(), rank_used(config), tuple(local.ATTN_MODULES)
    )
    newest = max((home / "checkpoints").rglob(compat.ADAPTER_WEIGHTS), key=lambda p: p.stat().st_mtime)
    state, _ = local.read_adapter_folder(newest.parent)
    moved = 0.0
    for key, value in state.items():
        if ".lora_A." in key:
            module = key.removeprefix("base_model.model.").split(".lora_A.")[0]
            moved = max(moved, float((value.float() - directions[module]).abs().max()))
    return moved


def run(settings: dict[str, str], home: Path) -> dict:
    from cookbook_engine import cli, config as cfg
    from cookbook_engine.training import lora_a
    from cookbook_engine.training.lora_a import lora_a_used
    from storage import Store
    from storage.evals import EvalStore

    if "keep_decay" in settings:
        lora_a.KEEP_DECAY[("rl", "arithmetic")] = float(settings["keep_decay"])
    name = f"rl-{time.strftime('%H%M%S')}"
    command = ["rl", "env=arithmetic", f"seed={settings.get('seed', '0')}", f"lora_a={settings.get('lora_a', 'auto')}"]
    command += [f"{k[3:]}={v}" for k, v in settings.items() if k.startswith("rl.")]
    config = cfg.parse_overrides("rl", command[1:])
    load_start = list(os.getloadavg())
    started = time.perf_counter()
    assert cli.main([*command, f"name={name}"]) == 0
    minutes = (time.perf_counter() - started) / 60
    run_id = next(r["run_id"] for r in Store.default().list_runs() if r["name"] == name)
    moved = a_moved(home, config) if lora_a_used(config) == "null_space" else None
    skip_base = settings.get("base") == "skip"
    models = run_id if skip_base else f"base,{run_id}"
    assert cli.main(["eval", f"models={models}", "evals=" + ",".join(EVALS), "--json"]) == 0
    store = EvalStore()
    job = store.list_jobs()[0]
    fresh = store.examples(job["eval_id"], EVALS[0])
    trained = fresh[fresh["model"] != "base"]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": common.machine(),
        "load_start": load_start,
        "settings": settings,
        "lora_a": lora_a_used(config),
        "train_minutes": round(minutes, 2),  # model load, directions (cached after the first run) and training
        "keep_decay": lora_a.KEEP_DECAY.get(("rl", "arithmetic"), 0.0),
        "a_max_moved": moved,  # 0: A stayed where it was fixed
        "fresh_trained": round(float(trained["correct"].astype(float).mean()), 3),
        "fresh_n": len(trained),
        "retention": common.retention_of_eval(store, job["eval_id"], skip_base),  # lost, gained, the wrong replies
    }


def main() -> None:
    common.run_once_and_append("rl-null-", RESULTS, run)


if __name__ == "__main__":
    main()
