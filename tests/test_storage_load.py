"""The storage load test (issue 22): a studio-like reader, three CLI-like runs, an evaluation and a sweep all write
one home at once while busy processes hold the machine's load at 8 or more, and nothing is lost: every run is
there and completed, with every step's metrics and every transcript, and the evaluation and the sweep are complete.

The writers are separate processes that call storage directly (what a run, `cookbook eval` and `cookbook sweep`
write, without a model), as fast as they can: the load on the database is higher than real training makes it.
Prints the figures: calls, writes/s, worst and 99th-percentile latency, and the load while it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from storage import Store, stop_owner
from storage.evals import EvalStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
STEPS = 60  # per CLI-like run
METRICS = {f"metric/{index}": 0.5 for index in range(5)}
SAMPLES = 8  # transcripts per step
EVAL_PAIRS = 6
SWEEP_MEMBERS = 3
SWEEP_STEPS = 20
BUSY_PROCESSES = 10
BOUND_S = 300  # every process of this test ends within this

COMMON = f"""
import json, os, sys, time
from storage import Store
from storage.evals import EvalStore
store, evals = Store(sys.argv[1]), EvalStore(Store(sys.argv[1]))
latencies = []
def timed(method, *args, **kwargs):
    started = time.perf_counter()
    result = method(*args, **kwargs)
    latencies.append(time.perf_counter() - started)
    return result
def train(run_id, steps, kind="rl"):
    timed(store.create_run, run_id, name=run_id, kind=kind, backend="clocked", base_model="m", config={{}},
          log_dir="/runs/" + run_id, total_steps=steps)
    timed(store.claim_run, run_id)
    for step in range(steps):
        timed(store.log_metrics, run_id, step, {METRICS!r})
        timed(store.add_transcripts, run_id, [dict(step=step, group_idx=0, sample_idx=i, prompt="Q", completion="A",
              reward=1.0) for i in range({SAMPLES})])
        timed(store.update_run, run_id, step=step + 1)
        assert timed(store.run_status, run_id) == "running"
    timed(store.update_run, run_id, status="completed")
def report():
    print(json.dumps({{"calls": len(latencies), "max_s": max(latencies), "latencies": latencies}}))
"""

CLI_RUN = COMMON + "train(sys.argv[2], " + str(STEPS) + ")\nreport()\n"

EVAL = COMMON + textwrap.dedent(
    f"""
    eval_id = sys.argv[2]
    timed(evals.create_job, eval_id, name=eval_id, models=["m"], eval_sets=["s"], settings={{}}, total={EVAL_PAIRS})
    timed(evals.update_job, eval_id, status="running")
    for index in range({EVAL_PAIRS}):
        timed(evals.save_result, eval_id, "m", f"set-{{index}}", kind="exact", result_key=f"k-{{index}}",
              model_spec="m", model_path=None, run_id=None, step=None, seconds=0.1,
              metrics=[dict(name="accuracy", value=0.5, n=20)],
              examples=[dict(index=i, prompt="Q", reference="A", output="A", score=1.0, correct=True, parsed="A")
                        for i in range(20)])
        timed(evals.update_job, eval_id, done=index + 1)
    timed(evals.update_job, eval_id, status="completed")
    report()
    """
)

SWEEP = COMMON + textwrap.dedent(
    f"""
    sweep_id = sys.argv[2]
    members = [dict(kind="sl", settings={{"lr": i}}, config={{}}) for i in range({SWEEP_MEMBERS})]
    timed(evals.create_sweep, sweep_id, name=sweep_id, spec={{}}, members=members)
    timed(evals.update_sweep, sweep_id, status="running")
    for index in range({SWEEP_MEMBERS}):
        run_id = f"{{sweep_id}}-{{index}}"
        timed(evals.update_member, sweep_id, index, status="running", run_id=run_id)
        train(run_id, {SWEEP_STEPS}, kind="sl")
        timed(evals.update_member, sweep_id, index, status="completed")
    timed(evals.update_sweep, sweep_id, status="completed")
    report()
    """
)

BUSY = f"import time\nend = time.monotonic() + {BOUND_S}\nwhile time.monotonic() < end:\n    pass\n"


def start(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, text=True)


def runnable() -> int:
    """Processes running or ready to run right now (the instantaneous figure behind the load average)."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])


def test_a_studio_three_cli_runs_an_eval_and_a_sweep_write_at_once_under_load_and_lose_nothing(tmp_path):
    db = tmp_path / "home" / "studio.duckdb"
    studio = Store(db)
    studio.schema_version()  # the owner starts before the clock does
    busy = [start(BUSY) for _ in range(BUSY_PROCESSES)]
    load: list[int] = []
    reads = {"count": 0, "max_s": 0.0}
    done = threading.Event()
    errors: list[BaseException] = []

    def studio_reader():  # what the runs, transcripts and evaluate pages read while runs are live
        try:
            while not done.is_set():
                load.append(runnable())
                started = time.perf_counter()
                for run in studio.list_runs():
                    studio.get_metrics_wide(run["run_id"])
                studio.get_transcripts("cli-0", limit=50)
                EvalStore(studio).list_jobs()
                EvalStore(studio).list_sweeps()
                reads["count"] += 1
                reads["max_s"] = max(reads["max_s"], time.perf_counter() - started)
                time.sleep(0.2)
        except BaseException as exc:
            errors.append(exc)

    try:
        time.sleep(3)  # let the busy processes raise the load
        reader = threading.Thread(target=studio_reader)
        reader.start()
        started = time.perf_counter()
        writers = [start(CLI_RUN, str(db), f"cli-{index}") for index in range(3)]
        writers += [start(EVAL, str(db), "eval-0"), start(SWEEP, str(db), "sweep-0")]
        outputs = [writer.communicate(timeout=BOUND_S)[0] for writer in writers]
        seconds = time.perf_counter() - started
        done.set()
        reader.join(timeout=60)
    finally:
        done.set()
        for process in busy:
            process.kill()
            process.wait()
    assert errors == [] and [writer.returncode for writer in writers] == [0] * 5

    # nothing lost
    runs = {run["run_id"]: run for run in studio.list_runs()}
    expected = {f"cli-{i}": STEPS for i in range(3)} | {f"sweep-0-{i}": SWEEP_STEPS for i in range(SWEEP_MEMBERS)}
    assert set(runs) == set(expected)
    for run_id, steps in expected.items():
        assert runs[run_id]["status"] == "completed" and runs[run_id]["step"] == steps
        wide = studio.get_metrics_wide(run_id)
        assert wide["step"].tolist() == list(range(steps)) and set(wide.columns) == {"step", *METRICS}
        assert not wide.isna().any().any()
        transcripts = studio.get_transcripts(run_id)
        assert len(transcripts) == steps * SAMPLES
        assert len(transcripts[["step", "sample_idx"]].drop_duplicates()) == steps * SAMPLES
    evals = EvalStore(studio)
    job = evals.get_job("eval-0")
    assert job["status"] == "completed" and job["done"] == EVAL_PAIRS
    assert len(evals.results(["eval-0"])) == EVAL_PAIRS and len(evals.examples("eval-0")) == EVAL_PAIRS * 20
    sweep = evals.get_sweep("sweep-0")
    assert sweep["status"] == "completed" and [m["status"] for m in sweep["members"]] == ["completed"] * 3

    # the figures
    reports = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    latencies = sorted(latency for report in reports for latency in report["latencies"])
    calls = len(latencies)
    mean_load = sum(load) / len(load)
    print(
        f"\n{calls} write-side calls from 5 processes in {seconds:.1f} s = {calls / seconds:.0f} calls/s; "
        f"latency max {latencies[-1] * 1000:.0f} ms, p99 {latencies[int(calls * 0.99)] * 1000:.0f} ms, "
        f"median {latencies[calls // 2] * 1000:.1f} ms; studio reads: {reads['count']} page refreshes, slowest "
        f"{reads['max_s']:.2f} s; runnable processes: mean {mean_load:.1f}, min {min(load)}; "
        f"load average (1 min) at the end {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs"
    )
    assert mean_load >= 8
    stop_owner(db)
