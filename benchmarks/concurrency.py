"""Several training processes on one machine: started together versus the same runs back to back.

What it measures: the wall time of N `cookbook` CLI runs (SL, or SL beside RL) started at the same moment, against
the sum of the same runs one after another, with the compute lease on (the default) and off
(COOKBOOK_COMPUTE_LEASE=off, i.e. every process computing whenever it likes, as before the lease). Target: together
no later than 1.15x back to back, and never a collapse. Each process is a real `cookbook` CLI run on the default
model with its own torch thread team; the studio's runs use the same model worker and lease, so a studio beside a
CLI run behaves as two CLI processes do here.

Run alone on an otherwise idle machine (its load averages are recorded): the point is what the processes do to each
other, not what other work does to them.
Run: .venv/bin/python benchmarks/concurrency.py [--steps 4] [--counts 2,3]
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
RL = ["rl", "env=arithmetic", "groups_per_batch=4", "group_size=4", "max_tokens=24", "save_every=0", "eval_every=0",
      "num_eval_problems=0"]


def workloads(count: int, steps: int) -> dict[str, list[list[str]]]:
    sl = SL + [f"max_steps={steps}"]
    rl = RL + [f"max_steps={max(1, steps // 2)}"]
    return {f"{count} x SL": [sl] * count, f"SL + RL{' + SL' * (count - 2)}": [sl, rl] + [sl] * (count - 2)}


def run_processes(commands: list[list[str]], together: bool, lease: bool, home: Path) -> tuple[float, list[float]]:
    """Wall time of all of them, and each one's own wall time."""
    env = {**os.environ, "COOKBOOK_HOME": str(home), "COOKBOOK_COMPUTE_LEASE": "on" if lease else "off"}
    cli = [sys.executable, "-m", "cookbook_engine.cli"]
    started = time.perf_counter()
    own: list[float] = []
    if together:
        processes = [(time.perf_counter(), subprocess.Popen(cli + c, env=env, cwd=common.REPO,
                                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                     for c in commands]
        for began, process in processes:
            _, err = process.communicate()
            own.append(time.perf_counter() - began)
            if process.returncode != 0:
                raise RuntimeError(err.decode()[-2000:])
    else:
        for command in commands:
            began = time.perf_counter()
            subprocess.run(cli + command, env=env, cwd=common.REPO, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
            own.append(time.perf_counter() - began)
    return time.perf_counter() - started, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--counts", default="2,3")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cookbook-concurrency-"))
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(common.REPO / ".test-cache" / "models"))  # shared with tests
    run_processes([SL + ["max_steps=1"]], together=False, lease=True, home=home)  # model cache warm
    rows, payload = [], {"load_average_start": common.load_average(), "steps": args.steps}
    for count in [int(c) for c in args.counts.split(",")]:
        for name, commands in workloads(count, args.steps).items():
            sequential, _ = run_processes(commands, together=False, lease=True, home=home)
            result = {"back_to_back_s": sequential}
            for lease in (False, True):
                wall, own = run_processes(commands, together=True, lease=lease, home=home)
                key = "with_lease" if lease else "without_lease"
                result[key] = {"wall_s": wall, "per_process_s": own, "ratio": wall / sequential}
                rows.append([name, "on" if lease else "off", f"{sequential:.1f}", f"{wall:.1f}",
                             f"{wall / sequential:.2f}x"])
            payload[name] = result
            print(rows[-2], rows[-1], flush=True)
    common.print_table("Processes started together vs back to back (wall seconds)",
                       ["runs", "lease", "back to back", "together", "together / back to back"], rows)
    common.write_result("concurrency", payload)


if __name__ == "__main__":
    main()
