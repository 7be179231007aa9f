"""Several training processes on one machine: started together versus the same runs back to back.

What it measures: the wall time of N `cookbook` CLI runs (SL, or SL beside RL) started at the same moment, against
the sum of the same runs one after another, with the compute lease on (the default) and off
(COOKBOOK_COMPUTE_LEASE=off, i.e. every process computing whenever it likes, as before the lease). Target: together
no later than 1.15x back to back, and never a collapse. Each process is a real `cookbook` CLI run on the default
model with its own torch thread team; the studio's runs use the same model worker and lease, so a studio beside a
CLI run behaves as two CLI processes do here.

It also reports peak resident memory: of each CLI process, and of one process training one and three SL runs at once
through its RunManager, as the studio does (one model worker per base model, so one copy of the base weights).

Run alone on an otherwise idle machine (its load averages are recorded): the point is what the processes do to each
other, not what other work does to them.
Run: .venv/bin/python benchmarks/concurrency.py [--steps 4] [--counts 2,3] [--only studio] [--no-memory]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

SL = ["sl", "dataset=builtin:facts", "batch_size=8", "learning_rate=1e-3", "save_every=0", "eval_every=0"]
RL = [
    "rl",
    "env=arithmetic",
    "groups_per_batch=4",
    "group_size=4",
    "max_tokens=24",
    "save_every=0",
    "eval_every=0",
    "num_eval_problems=0",
]
STUDIO = "studio"  # a workload's command that starts with this runs its SL settings as the studio does


def workloads(count: int, steps: int) -> dict[str, list[list[str]]]:
    """CLI + CLI (SL only, and SL beside RL), and the studio (a RunManager process) beside CLI runs."""
    sl = SL + [f"max_steps={steps}"]
    rl = RL + [f"max_steps={max(1, steps // 2)}"]
    return {
        f"{count} x CLI SL": [sl] * count,
        f"CLI SL + CLI RL{' + CLI SL' * (count - 2)}": [sl, rl] + [sl] * (count - 2),
        f"studio SL + CLI SL{' + CLI RL' * (count - 2)}": [[STUDIO] + sl[1:], sl] + [rl] * (count - 2),
    }


def run_processes(
    commands: list[list[str]], together: bool, lease: bool, home: Path
) -> tuple[float, list[float], list[float]]:
    """Wall time of all of them, each one's own wall time, and each one's peak resident memory (GB)."""
    env = {**os.environ, "COOKBOOK_HOME": str(home), "COOKBOOK_COMPUTE_LEASE": "on" if lease else "off"}
    cli = [sys.executable, "-m", "cookbook_engine.cli"]
    started = time.perf_counter()
    own: list[float] = []
    peaks: list[float] = []

    def start(command):
        argv = [sys.executable, "-c", STUDIO_LIKE, "1", *command[1:]] if command[0] == STUDIO else cli + command
        return time.perf_counter(), subprocess.Popen(
            argv, env=env, cwd=common.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def finish(began, process):
        _, status, usage = os.wait4(process.pid, 0)  # ru_maxrss: the process's peak resident set, in KB
        own.append(time.perf_counter() - began)
        peaks.append(usage.ru_maxrss / 1024**2)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(process.args)} failed")

    if together:
        for began, process in [start(command) for command in commands]:
            finish(began, process)
    else:
        for command in commands:
            finish(*start(command))
    return time.perf_counter() - started, own, peaks


STUDIO_LIKE = """
import sys
from cookbook_engine import config as cfg
from cookbook_engine.runs import RunManager
manager = RunManager()
ids = [manager.start(cfg.parse_overrides('sl', sys.argv[2:])) for _ in range(int(sys.argv[1]))]
runs = [manager.wait(run_id, timeout=3600) for run_id in ids]
assert all(run["status"] == "completed" for run in runs), [run["status"] for run in runs]
"""


def studio_like_peak_gb(runs: int, steps: int, home: Path) -> float:
    """Peak resident memory of one process training `runs` SL runs at once through its RunManager, as the studio
    does (they share one model worker, so one copy of the base weights)."""
    env = {**os.environ, "COOKBOOK_HOME": str(home)}
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a full pipe would block the child we wait for
        process = subprocess.Popen(
            [sys.executable, "-c", STUDIO_LIKE, str(runs), *SL[1:], f"max_steps={steps}"],
            env=env,
            cwd=common.REPO,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise RuntimeError(errors.read().decode(errors="replace")[-2000:])
    return usage.ru_maxrss / 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--counts", default="2,3")
    parser.add_argument("--only", default="", help="run only the workloads whose name contains this")
    parser.add_argument("--no-memory", action="store_true", help="skip the one-process memory measurement")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cookbook-concurrency-"))
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(common.REPO / ".test-cache" / "models"))  # shared with tests
    run_processes([SL + ["max_steps=1"]], together=False, lease=True, home=home)  # model cache warm
    rows, payload = [], {"load_average_start": common.load_average(), "steps": args.steps}
    for count in [int(c) for c in args.counts.split(",")]:
        for name, commands in workloads(count, args.steps).items():
            if args.only not in name:
                continue
            sequential, _, peaks = run_processes(commands, together=False, lease=True, home=home)
            result = {"back_to_back_s": sequential, "peak_rss_gb_per_process": peaks}
            for lease in (False, True):
                wall, own, _ = run_processes(commands, together=True, lease=lease, home=home)
                key = "with_lease" if lease else "without_lease"
                result[key] = {"wall_s": wall, "per_process_s": own, "ratio": wall / sequential}
                rows.append(
                    [name, "on" if lease else "off", f"{sequential:.1f}", f"{wall:.1f}", f"{wall / sequential:.2f}x"]
                )
            payload[name] = result
            print(rows[-2], rows[-1], flush=True)
    memory = (
        {}
        if args.no_memory
        else {f"{runs} SL run(s) in one process": studio_like_peak_gb(runs, args.steps, home) for runs in (1, 3)}
    )
    payload["peak_rss_gb_one_process"] = memory
    common.print_table(
        "Processes started together vs back to back (wall seconds)",
        ["runs", "lease", "back to back", "together", "together / back to back"],
        rows,
    )
    common.print_table(
        "Peak resident memory of one process (GB)",
        ["what", "peak GB"],
        [[name, f"{gb:.2f}"] for name, gb in memory.items()],
    )
    common.write_result("concurrency" + (f"-{args.only.replace(' ', '-')}" if args.only else ""), payload)


if __name__ == "__main__":
    main()
