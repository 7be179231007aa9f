"""Benchmark: what storage costs a training step, and how fast the studio reads a full history.

1. Writes: real SL training steps of the local backend (batch 8 chat examples, LoRA r=32, forward_backward +
   optim_step) in blocks without writes, with the writes a step makes through RunLogger into the studio's DuckDB
   store and metrics.jsonl (one step's metrics, 11 values as the SL loop logs, plus an RL step's transcripts, 8
   groups x 8 samples), and with the same writes made by a helper process (awaited, or handed over without
   waiting). The figure is the median step time with writes over the median without, so it includes what the
   writes do to the next step, not only their own time.
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
if "COOKBOOK_STORAGE_BENCH_HOME" not in os.environ:  # a fresh home per run (the helper process inherits it)
    os.environ["COOKBOOK_STORAGE_BENCH_HOME"] = tempfile.mkdtemp(prefix="cookbook-storage-bench-")
os.environ["COOKBOOK_HOME"] = os.environ["COOKBOOK_STORAGE_BENCH_HOME"]

import common  # noqa: E402  (sets sys.path for the engine)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from cookbook_engine import config as cfg  # noqa: E402
from cookbook_engine import models, paths  # noqa: E402
from cookbook_engine.run_logger import RunLogger  # noqa: E402
from storage import Store  # noqa: E402

RUNS = 50
STEPS = 2_000
METRIC_NAMES = {
    "sl": ["train_mean_nll", "learning_rate", "num_tokens", "num_loss_tokens", "epoch", "progress", "time/step",
           "time/total", "throughput/tokens_per_s", "optim/grad_norm"],
    "dpo": ["dpo_loss", "accuracy", "margin", "chosen_reward", "rejected_reward", "learning_rate", "progress",
            "time/step", "time/total", "optim/grad_norm"],
    "rl": ["env/all/reward/total", "env/all/correct", "env/all/format", "ac_tokens_per_turn", "optim/kl_sample_train",
           "optim/entropy", "learning_rate", "progress", "time/step", "time/total"],
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
    return {"train_mean_nll": 2.0 / (1 + step), "learning_rate": 1e-3, "num_tokens": 1400, "num_loss_tokens": 700,
            "num_sequences": 8, "epoch": 0, "progress": step / 100, "time/step": 3.2, "time/total": 3.2 * step,
            "throughput/tokens_per_s": 430.0, "optim/grad_norm": 0.8}


def step_transcripts(step: int) -> list[dict]:
    prompt = "Solve the problem and give the final answer after 'Answer:'. " * 5
    completion = "Let me work through this step by step. First we add the numbers, then we check. " * 5
    return [{"step": step, "group_idx": g, "sample_idx": s, "prompt": prompt, "completion": completion,
             "reward": float((g + s) % 2), "advantage": 0.5 - (g + s) % 2, "stop_reason": "stop",
             "metrics": {"correct": float((g + s) % 2), "format": 1.0}} for g in range(8) for s in range(8)]


def _helper_writer(connection, home: str, run_id: str, log_dir: str) -> None:
    """A helper process that makes the same RunLogger writes for the parent (the variant the write benchmark
    compares): DuckDB's open/close then trims this small process's heap, not the training process's."""
    os.environ["COOKBOOK_HOME"] = home
    logger = RunLogger(Store.default(), run_id, log_dir)
    while (message := connection.recv()) is not None:
        step = message
        logger.log_metrics(step, step_metrics(step))
        logger.log_transcripts(step_transcripts(step))
        connection.send(step)


def writes(repeats: int) -> dict:
    """Blocks of training steps without writes, with the writes made in this (the training) process, and with the
    same writes handed to a helper process; the first step of each block is left out (it carries the previous
    block's effects). A step's time includes its writes and whatever they do to the next step: the store's DuckDB
    open runs glibc's malloc_trim, which hands the training step's freed activation memory back to the kernel, and
    the next step faults it in again."""
    import multiprocessing

    from tinker import types

    from cookbook_engine.backends.local import LocalServiceClient
    from cookbook_engine.train_common import datum_from_tokens

    store = Store.default()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    log_dir = paths.run_dir(run_id)
    store.create_run(run_id, name="write benchmark", kind="sl", backend="local", base_model=models.DEFAULT_MODEL,
                     config=cfg.to_dict(cfg.SLConfig()), log_dir=log_dir, status="completed")
    logger = RunLogger(store, run_id, log_dir)
    parent_end, child_end = multiprocessing.get_context("spawn").Pipe()
    helper = multiprocessing.get_context("spawn").Process(
        target=_helper_writer, args=(child_end, str(paths.home()), run_id, str(log_dir)), daemon=True)
    helper.start()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    batch = common.chat_examples(tokenizer, 8)  # the same batch every step: only the writes differ
    data = [datum_from_tokens(t, w) for t, w in batch]
    client = LocalServiceClient().create_lora_training_client(models.DEFAULT_MODEL, rank=32, seed=0)
    adam = types.AdamParams(learning_rate=1e-5)
    per_block = 3
    seconds: dict[str, list[float]] = {"plain": [], "in_process": [], "helper": [], "helper_async": [],
                                       "log_metrics": [], "log_transcripts": []}
    step = 0
    for mode in ["plain", "in_process", "helper", "helper_async"] * repeats:
        for index in range(per_block + 1):
            started = time.perf_counter()
            client.forward_backward(data, "cross_entropy").result()
            client.optim_step(adam).result()
            written = time.perf_counter()
            if mode == "in_process":
                logger.log_metrics(step, step_metrics(step))
                metrics_done = time.perf_counter()
                logger.log_transcripts(step_transcripts(step))
                if index:
                    seconds["log_metrics"].append(metrics_done - written)
                    seconds["log_transcripts"].append(time.perf_counter() - metrics_done)
            elif mode == "helper":
                parent_end.send(step)
                parent_end.recv()
            elif mode == "helper_async":  # hand the writes over and go on, as a loop whose worker is ahead does
                parent_end.send(step)
            if index:
                seconds[mode].append(time.perf_counter() - started)
            step += 1
        if mode == "helper_async":
            for _ in range(per_block + 1):
                parent_end.recv()
    parent_end.send(None)
    helper.join(timeout=30)
    client.close()
    medians = {k: common.median(v) for k, v in seconds.items()}
    return {"tokens_per_step": sum(len(t) for t, _ in batch), "seconds": seconds, "medians": medians,
            "added_share_in_process": medians["in_process"] / medians["plain"] - 1,
            "added_share_helper": medians["helper"] / medians["plain"] - 1,
            "added_share_helper_async": medians["helper_async"] / medians["plain"] - 1}


# -------------------------------------------------------------------------------------------------- reads


def fill(store: Store) -> list[str]:
    rng = np.random.default_rng(0)
    run_ids = []
    kinds = ["sl", "dpo", "rl"]
    for index in range(RUNS):
        kind = kinds[index % 3]
        run_id = f"run-{index:02d}-{uuid.uuid4().hex[:6]}"
        config = cfg.to_dict(cfg.CONFIG_TYPES[kind]())
        store.create_run(run_id, name=f"{kind} run {index}", kind=kind, backend="local",
                         base_model=models.DEFAULT_MODEL, config=config, log_dir=paths.run_dir(run_id),
                         status="completed", total_steps=STEPS)
        names = METRIC_NAMES[kind]
        steps = np.repeat(np.arange(STEPS), len(names))
        frame = pd.DataFrame({"step": steps, "name": np.tile(names, STEPS),
                              "value": rng.normal(size=len(steps)).cumsum() / 100})
        store.log_metrics_bulk(run_id, frame)
        run_ids.append(run_id)
    return run_ids


def reads(repeats: int) -> dict:
    from app import widgets  # the runs page's own helpers

    store = Store.default()
    started = time.perf_counter()
    run_ids = fill(store)
    fill_seconds = time.perf_counter() - started
    one = run_ids[len(run_ids) // 2]

    def runs_page_data():
        runs = store.list_runs()
        widgets.runs_frame(runs, widgets.key_metric_values(store, runs))

    result = {"fill_seconds": fill_seconds, "points_per_run": STEPS * 10, "runs": RUNS,
              "runs_page_data": timed(runs_page_data, repeats),
              "run_charts_get_metrics": timed(lambda: store.get_metrics(one), repeats),
              "run_charts_get_metrics_wide": timed(lambda: store.get_metrics_wide(one), repeats)}
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
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    models.prepare_default_model()
    load_start = common.load_average()
    print(f"home {paths.home()}, load average {load_start}", flush=True)
    write = writes(2)
    medians = write["medians"]
    print(f"  step {medians['plain']:.2f} s, with writes {medians['in_process']:.2f} s, with writes in a helper "
          f"process {medians['helper']:.2f} s", flush=True)
    read = reads(args.repeats)

    def ms(key: str) -> str:
        return f"{common.median(read[key]) * 1e3:.0f} ms"

    rows = [
        ["training step without writes (8 x chat, LoRA r=32)", f"{medians['plain'] * 1e3:.0f} ms", "", ""],
        ["step + metrics + 64 transcripts (RunLogger, in process)", f"{medians['in_process'] * 1e3:.0f} ms",
         f"{write['added_share_in_process']:+.1%} per step", "< 1%"],
        ["  of which RunLogger.log_metrics", f"{medians['log_metrics'] * 1e3:.0f} ms", "", ""],
        ["  of which RunLogger.log_transcripts", f"{medians['log_transcripts'] * 1e3:.0f} ms", "", ""],
        ["step + the same writes made by a helper process", f"{medians['helper'] * 1e3:.0f} ms",
         f"{write['added_share_helper']:+.1%} per step", "< 1%"],
        ["step, writes handed to a helper process (not awaited)", f"{medians['helper_async'] * 1e3:.0f} ms",
         f"{write['added_share_helper_async']:+.1%} per step", "< 1%"],
        ["runs page data (list_runs + key metrics), 50 runs", ms("runs_page_data"), "", "< 1 s"],
        ["one run's charts: get_metrics (20,000 points)", ms("run_charts_get_metrics"), "", "< 1 s"],
        ["one run's charts: get_metrics_wide", ms("run_charts_get_metrics_wide"), "", "< 1 s"],
        ["runs page rendered (AppTest)", ms("render_runs_page"), "", "< 1 s"],
        ["run page with charts rendered (AppTest)", ms("render_run_page"), "", "< 1 s"],
    ]
    common.print_table(f"Storage and studio (median of {args.repeats})", ["what", "time", "share", "target"], rows)
    common.write_result("storage_studio", {"load_average_start": load_start, "writes": write, "reads": read})
    shutil.rmtree(os.environ["COOKBOOK_STORAGE_BENCH_HOME"], ignore_errors=True)  # the throw-away studio home


if __name__ == "__main__":
    main()
