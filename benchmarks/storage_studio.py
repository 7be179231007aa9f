"""Benchmark: what storage costs a training step, and how fast the studio reads a full history.

1. Writes: real SL training steps of the local backend (batch 8 chat examples, LoRA r=32, forward_backward +
   optim_step) in blocks without writes, and with everything a loop does per step besides training: one step's
   metrics through RunLogger (11 values as the SL loop logs, to metrics.jsonl and the store), an RL step's
   transcripts (8 groups x 8 samples), the progress update (RunContext.progress) and the cancel poll
   (RunContext.cancelled), through a storage.Store as runs make them (each call run by the home's storage owner
   process, storage/owner.py). The figure is the median step time with writes over the median without, so it
   includes what the writes do to the next step (and the owner's work competing for the two cores), not only
   their own time; the owner's CPU time per step is reported too.
2. Reads: a store holding 50 finished runs (SL, DPO and RL) of 20,000 metric points each (2,000 steps x 10
   metrics): the data calls of the runs page (list_runs + each kind's key metric) and of one run's charts
   (get_metrics, and get_metrics_wide), and the two pages rendered by Streamlit's AppTest (server side: the
   script, queries, tables and Plotly figures; not the browser). Medians of 5 after a warm-up.

    .venv/bin/python benchmarks/storage_studio.py

Not a test: it prints a table and writes benchmarks/results/storage_studio.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

BENCH_HOME = Path(tempfile.gettempdir()) / "cookbook-bench-home"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(BENCH_HOME / "models"))  # converted once, shared
if "COOKBOOK_STORAGE_BENCH_HOME" not in os.environ:  # a fresh home per run
    os.environ["COOKBOOK_STORAGE_BENCH_HOME"] = tempfile.mkdtemp(prefix="cookbook-storage-bench-")
os.environ["COOKBOOK_HOME"] = os.environ["COOKBOOK_STORAGE_BENCH_HOME"]

import common  # noqa: E402  (sets sys.path for the engine)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from cookbook_engine import (  # noqa: E402
    config as cfg,  # noqa: E402
    models,
    paths,
)
from cookbook_engine.training.run_logger import RunLogger  # noqa: E402
from storage import Store, stop_owner  # noqa: E402
from storage.client import read_owner_info  # noqa: E402

RUNS = 50
STEPS = 2_000
METRIC_NAMES = {
    "sl": [
        "train_mean_nll",
        "learning_rate",
        "num_tokens",
        "num_loss_tokens",
        "epoch",
        "progress",
        "time/step",
        "time/total",
        "throughput/tokens_per_s",
        "optim/grad_norm",
    ],
    "dpo": [
        "dpo_loss",
        "accuracy",
        "margin",
        "chosen_reward",
        "rejected_reward",
        "learning_rate",
        "progress",
        "time/step",
        "time/total",
        "optim/grad_norm",
    ],
    "rl": [
        "env/all/reward/total",
        "env/all/correct",
        "env/all/format",
        "ac_tokens_per_turn",
        "optim/kl_sample_train",
        "optim/entropy",
        "learning_rate",
        "progress",
        "time/step",
        "time/total",
    ],
}


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return seconds


# ------------------------------------------------------------------------------------------------- writes


def step_metrics(step: int) -> dict[str, float]:
    return {
        "train_mean_nll": 2.0 / (1 + step),
        "learning_rate": 1e-3,
        "num_tokens": 1400,
        "num_loss_tokens": 700,
        "num_sequences": 8,
        "epoch": 0,
        "progress": step / 100,
        "time/step": 3.2,
        "time/total": 3.2 * step,
        "throughput/tokens_per_s": 430.0,
        "optim/grad_norm": 0.8,
    }


def step_transcripts(step: int) -> list[dict]:
    prompt = "Solve the problem and give the final answer after 'Answer:'. " * 5
    completion = "Let me work through this step by step. First we add the numbers, then we check. " * 5
    return [
        {
            "step": step,
            "group_idx": g,
            "sample_idx": s,
            "prompt": prompt,
            "completion": completion,
            "reward": float((g + s) % 2),
            "advantage": 0.5 - (g + s) % 2,
            "stop_reason": "stop",
            "metrics": {"correct": float((g + s) % 2), "format": 1.0},
        }
        for g in range(8)
        for s in range(8)
    ]


def owner_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writes(repeats: int, per_block: int) -> dict:
    """Blocks of training steps without writes ("plain") and with a loop's per-step writes through a Store
    ("store"); the first step of each block is left out (it carries the previous block's effects)."""
    from tinker import types

    from cookbook_engine.backends.local import LocalServiceClient
    from cookbook_engine.runs import RunContext
    from cookbook_engine.training.common import datum_from_tokens

    store = Store.default()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    log_dir = paths.run_dir(run_id)
    store.create_run(
        run_id,
        name="write benchmark",
        kind="sl",
        backend="local",
        base_model=models.DEFAULT_MODEL,
        config=cfg.to_dict(cfg.SLConfig()),
        log_dir=log_dir,
        status="running",
    )
    ctx = RunContext(run_id, store, RunLogger(store, run_id, log_dir), log_dir)
    owner_pid = read_owner_info(store.path)["pid"]
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    batch = common.chat_examples(tokenizer, 8)  # the same batch every step: only the writes differ
    data = [datum_from_tokens(t, w) for t, w in batch]
    trainer = LocalServiceClient().create_lora_training_client(models.DEFAULT_MODEL, rank=32, seed=0).result()
    adam = types.AdamParams(learning_rate=1e-5)
    seconds: dict[str, list[float]] = {"plain": [], "store": [], "store_calls": []}
    owner_cpu_per_step: list[float] = []
    step = 0
    total = repeats * 2 * (per_block + 1)
    for mode in ["plain", "store"] * repeats:
        cpu_before = owner_cpu_seconds(owner_pid)
        for index in range(per_block + 1):
            started = time.perf_counter()
            trainer.forward_backward(data, "cross_entropy").result()
            trainer.optim_step(adam).result()
            trained = time.perf_counter()
            if mode != "plain":  # what a loop does after each step besides training
                ctx.logger.log_metrics(step, step_metrics(step))
                ctx.logger.log_transcripts(step_transcripts(step))
                ctx.progress(step + 1, total)
                ctx.cancelled()  # polls the run's status at most once a second: every step here
                if index:
                    seconds[f"{mode}_calls"].append(time.perf_counter() - trained)
            if index:
                seconds[mode].append(time.perf_counter() - started)
            step += 1
        if mode == "store":
            owner_cpu_per_step.append((owner_cpu_seconds(owner_pid) - cpu_before) / (per_block + 1))
    trainer.close()
    medians = {k: common.median(v) for k, v in seconds.items()}
    stored = store.get_metrics(run_id, ["train_mean_nll"])["step"].tolist()
    return {
        "tokens_per_step": sum(len(t) for t, _ in batch),
        "per_block": per_block,
        "repeats": repeats,
        "seconds": seconds,
        "medians": medians,
        "owner_cpu_seconds_per_step": owner_cpu_per_step,
        "steps_written": repeats * (per_block + 1),
        "steps_stored": len(stored),  # equal: none lost
        "added_share": medians["store"] / medians["plain"] - 1,
    }


# -------------------------------------------------------------------------------------------------- reads


def fill(store: Store) -> list[str]:
    rng = np.random.default_rng(0)
    run_ids = []
    kinds = ["sl", "dpo", "rl"]
    for index in range(RUNS):
        kind = kinds[index % 3]
        run_id = f"run-{index:02d}-{uuid.uuid4().hex[:6]}"
        config = cfg.to_dict(cfg.CONFIG_TYPES[kind]())
        store.create_run(
            run_id,
            name=f"{kind} run {index}",
            kind=kind,
            backend="local",
            base_model=models.DEFAULT_MODEL,
            config=config,
            log_dir=paths.run_dir(run_id),
            status="completed",
            total_steps=STEPS,
        )
        names = METRIC_NAMES[kind]
        steps = np.repeat(np.arange(STEPS), len(names))
        frame = pd.DataFrame(
            {"step": steps, "name": np.tile(names, STEPS), "value": rng.normal(size=len(steps)).cumsum() / 100}
        )
        store.log_metrics_bulk(run_id, frame)
        run_ids.append(run_id)
    return run_ids


def reads(repeats: int) -> dict:
    from app import widgets  # the runs page's own helpers

    started = time.perf_counter()
    run_ids = fill(Store.default())
    fill_seconds = time.perf_counter() - started
    one = run_ids[len(run_ids) // 2]
    store = Store.default()  # the studio reads through its store (the owner process runs the queries)

    def runs_page_data():
        runs = store.list_runs()
        widgets.runs_frame(runs, widgets.key_metric_values(store, runs))

    result = {
        "fill_seconds": fill_seconds,
        "points_per_run": STEPS * 10,
        "runs": RUNS,
        "runs_page_data": timed(runs_page_data, repeats),
        "run_charts_get_metrics": timed(lambda: store.get_metrics(one), repeats),
        "run_charts_get_metrics_wide": timed(lambda: store.get_metrics_wide(one), repeats),
    }
    result.update(render_pages(one, repeats))
    return result


def render_pages(run_id: str, repeats: int) -> dict:
    """The runs page and one run's page under Streamlit's AppTest (the script run, server side)."""
    from streamlit.testing.v1 import AppTest

    main = common.REPO / "app" / "main.py"
    timings = {}
    for page, query in (("runs", {}), ("run", {"run": run_id})):
        seconds = []
        for attempt in range(repeats + 1):
            at = AppTest.from_file(str(main), default_timeout=120)
            at.run()
            at.query_params.update(query)
            started = time.perf_counter()
            at.switch_page(f"../pages/{page}.py").run()
            elapsed = time.perf_counter() - started
            if at.exception:
                raise RuntimeError(f"page {page} failed: {[e.value for e in at.exception]}")
            if attempt:
                seconds.append(elapsed)
        timings[f"render_{page}_page"] = seconds
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions of each read")
    parser.add_argument("--write-repeats", type=int, default=4, help="blocks of each write mode")
    parser.add_argument("--per-block", type=int, default=5, help="timed training steps per block")
    args = parser.parse_args()
    models.prepare_default_model()
    load_start = common.load_average()
    print(f"home {paths.home()}, load average {load_start}", flush=True)
    write = writes(args.write_repeats, args.per_block)
    medians = write["medians"]
    print(
        f"  step {medians['plain']:.3f} s, with writes through the storage owner {medians['store']:.3f} s "
        f"({write['added_share']:+.2%})",
        flush=True,
    )
    read = reads(args.repeats)

    def ms(key: str) -> str:
        return f"{common.median(read[key]) * 1e3:.0f} ms"

    rows = [
        ["training step without writes (8 x chat, LoRA r=32)", f"{medians['plain'] * 1e3:.0f} ms", "", ""],
        [
            "step + metrics, 64 transcripts, progress, cancel poll (through the storage owner)",
            f"{medians['store'] * 1e3:.0f} ms",
            f"{write['added_share']:+.2%} per step",
            "< 1%",
        ],
        ["  of which the calls in the training process", f"{medians['store_calls'] * 1e3:.1f} ms", "", ""],
        [
            "  owner process CPU per step",
            f"{common.median(write['owner_cpu_seconds_per_step']) * 1e3:.0f} ms",
            "",
            "",
        ],
        ["steps written / stored (all writes landed)", f"{write['steps_written']} / {write['steps_stored']}", "", ""],
        ["runs page data (list_runs + key metrics), 50 runs", ms("runs_page_data"), "", "< 1 s"],
        ["one run's charts: get_metrics (20,000 points)", ms("run_charts_get_metrics"), "", "< 1 s"],
        ["one run's charts: get_metrics_wide", ms("run_charts_get_metrics_wide"), "", "< 1 s"],
        ["runs page rendered (AppTest)", ms("render_runs_page"), "", "< 1 s"],
        ["run page with charts rendered (AppTest)", ms("render_run_page"), "", "< 1 s"],
    ]
    common.print_table(f"Storage and studio (median of {args.repeats})", ["what", "time", "share", "target"], rows)
    common.write_result("storage_studio", {"load_average_start": load_start, "writes": write, "reads": read})
    stop_owner(Store.default().path)
    shutil.rmtree(os.environ["COOKBOOK_STORAGE_BENCH_HOME"], ignore_errors=True)  # the throw-away studio home


if __name__ == "__main__":
    main()
