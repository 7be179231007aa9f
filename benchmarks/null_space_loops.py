"""An experiment for issue 23 (item 1, SFT's and DPO's retention): the SFT demo and the DPO default with LoRA's
input side A fixed away from ordinary chats, as RL's default does since 2026-11-29 (`lora_a=null_space`,
training/null_space.py), through the engine's own loops and local backend. SL and DPO have no `lora_a` setting, so
this script fixes A itself: it wraps the loop's `start_training_client` to call the local backend's `fix_lora_a`
with the directions where the run's task chats differ most from the ordinary keep chats:

- kind=sl: the task chats are the Quorvania facts rows (`builtin.fact_rows_only()`), trained `facts` times over with
  no replay rows (the null-space form measured best in benchmarks/sft_null_space.py's own loop: rank 8, the facts
  three times), or with data=builtin on the demo's own `builtin:facts` (the facts twice, the replay and neighbour
  rows); evaluated on `facts-probes` and `retention`.
- kind=dpo: the task chats are `builtin:concise-prefs`' pairs, each side (prompt + chosen, prompt + rejected);
  trained on that dataset with the DPO default's settings; evaluated on the default's own kinds, the kinds never
  trained and `retention`.

Then `cookbook eval models=base,RUN`, with the retention answers lost and gained. lora_a=trained runs the same
data and settings with A trained (the control).

Settings (key=value, comma-separated; one run per call): kind (sl | dpo), lora_a (null_space | trained), rank (sl 8,
dpo 32), data (sl: facts | builtin), facts (sl: copies of the facts rows, 3), seed (0), and any loop setting as
set.KEY=VALUE (e.g. set.learning_rate=5e-4; the engine's LoRA alpha is 32 whatever the rank, so rank 8 scales B A
by 4 where sft_null_space.py's loop scaled it by 1). Appends to results/null_space_loops.json. Run alone (8-15
minutes each on a 2-core CPU, plus 2-4 minutes once per task for the covariances):
    ../.venv/bin/python null_space_loops.py kind=sl,set.learning_rate=5e-4
    ../.venv/bin/python null_space_loops.py kind=dpo
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import common

RESULTS = common.RESULTS / "null_space_loops.json"
EVALS = {
    "sl": ("builtin:facts-probes", "builtin:retention"),
    "dpo": ("builtin:prefs-style-controlled", "builtin:prefs-unseen-kinds", "builtin:retention"),
}


def task_chats(kind: str) -> list[dict]:
    """The chats a step of this kind reads: the facts rows, or each side of the DPO default's pairs."""
    from cookbook_engine.data import builtin

    if kind == "sl":
        return builtin.fact_rows_only()
    chats = []
    for pair in builtin.concise_prefs_pairs():
        for reply in (pair.chosen, pair.rejected):
            messages = [{"role": "user", "content": pair.prompt}, {"role": "assistant", "content": reply}]
            chats.append({"messages": messages})
    return chats


def fix_a_on_start(kind: str, rank: int, modules: tuple[str, ...]) -> None:
    """Wrap the loop's client start so a fresh client's A is fixed to the null-space directions."""
    from cookbook_engine.dpo import loop as dpo_loop
    from cookbook_engine.sl import loop as sl_loop
    from cookbook_engine.training import null_space

    loop = sl_loop if kind == "sl" else dpo_loop
    started_client = loop.start_training_client

    def start(config, resume, ctx):
        service, client, start_step = started_client(config, resume, ctx)
        directions = null_space.directions_for(config.model, task_chats(kind), rank, modules)
        print(f"fixed A on {client.fix_lora_a(directions).result()} projections (rank {rank})", flush=True)
        return service, client, start_step

    loop.start_training_client = start


def dataset(kind: str, settings: dict[str, str], home: Path) -> str:
    if kind == "dpo":
        return "builtin:concise-prefs"
    if settings.get("data") == "builtin":  # the demo's data: the facts twice, the replay and neighbour rows
        return "builtin:facts"
    from cookbook_engine.data import builtin

    path = home / "facts-only.jsonl"
    rows = builtin.fact_rows_only() * int(settings.get("facts", "3"))
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def accuracy_of(store, eval_id: str, eval_set: str) -> dict[str, float]:
    examples = store.examples(eval_id, eval_set)
    is_base = examples["model"] == "base"
    return {
        side: round(float(rows["correct"].astype(float).mean()), 3)
        for side, rows in (("base", examples[is_base]), ("trained", examples[~is_base]))
    }


def run(settings: dict[str, str], home: Path) -> dict:
    from cookbook_engine import cli
    from cookbook_engine.backends.local import ATTN_MODULES, MLP_MODULES
    from cookbook_engine.evals.retention import retention_of_job
    from storage import Store
    from storage.evals import EvalStore

    kind = settings.get("kind", "sl")
    lora_a = settings.get("lora_a", "null_space")
    rank = int(settings.get("rank", "8" if kind == "sl" else "32"))
    if lora_a == "null_space":
        fix_a_on_start(kind, rank, tuple(ATTN_MODULES) + tuple(MLP_MODULES))
    name = f"{kind}-{time.strftime('%H%M%S')}"
    command = [kind, f"dataset={dataset(kind, settings, home)}", f"seed={settings.get('seed', '0')}"]
    command += [f"lora_rank={rank}", *(f"{k[4:]}={v}" for k, v in settings.items() if k.startswith("set."))]
    if kind == "sl":
        command += [
            "num_epochs=1",
            "batch_size=8",
            *([] if "set.learning_rate" in settings else ["learning_rate=5e-4"]),
        ]
    load_start = list(os.getloadavg())
    started = time.perf_counter()
    assert cli.main([*command, f"name={name}"]) == 0
    minutes = (time.perf_counter() - started) / 60
    run_id = next(r["run_id"] for r in Store.default().list_runs() if r["name"] == name)
    evals = EVALS[kind]
    assert cli.main(["eval", f"models=base,{run_id}", "evals=" + ",".join(evals), "--json"]) == 0
    store = EvalStore()
    eval_id = store.list_jobs()[0]["eval_id"]
    retention = store.examples(eval_id, "builtin:retention")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": common.machine(),
        "load_start": load_start,
        "settings": settings,
        "command": command,
        "train_minutes": round(minutes, 2),  # model load, directions (cached after the first run) and training
        "accuracy": {eval_set: accuracy_of(store, eval_id, eval_set) for eval_set in evals[:-1]},
        "retention": retention_of_job(retention),  # with the answers lost and gained
    }


def main() -> None:
    common.run_once_and_append("null-space-loops-", RESULTS, run)


if __name__ == "__main__":
    main()
