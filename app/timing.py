"""What the run pages say about time and resources: elapsed time, an ETA from the run's own recent step times, time
per step, and the CPU and memory use of the process that trains the run (read live, every refresh).

The numbers come from cookbook_engine/speed.py and storage; this module only formats them and draws nothing.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from cookbook_engine import compute_lease, paths, speed
from storage import statuses


@dataclass
class RunTiming:
    elapsed_s: float | None
    eta_s: float | None
    step_s: float | None  # median of the recent steps


def _seconds_between(start, end) -> float | None:
    if start is None or pd.isna(start):
        return None
    end = end if end is not None and not pd.isna(end) else datetime.now(UTC).replace(tzinfo=None)
    return max(0.0, (end - start).total_seconds())


def run_timing(store, run: dict) -> RunTiming:
    """Elapsed time for any run; ETA and seconds per step for an active one (from its `time/total` metric)."""
    elapsed = _seconds_between(run.get("started_at"), run.get("finished_at"))
    if run["status"] not in statuses.ACTIVE:
        return RunTiming(elapsed, None, None)
    frame = store.get_metrics(run["run_id"], ["time/total"])
    durations = speed.step_seconds(
        list(zip(frame["step"].astype(int), frame["value"].astype(float))), run.get("kind", "sl")
    )
    return RunTiming(
        elapsed,
        speed.eta_seconds(run.get("step"), run.get("total_steps"), durations),
        speed.recent_step_seconds(durations),
    )


def since_start_text(run: dict) -> str:
    """'started 1 min 13 s ago' for an active run ('starting' before it has a start time)."""
    elapsed = _seconds_between(run.get("started_at"), None)
    return f"started {speed.clock(elapsed)} ago" if elapsed is not None else "starting"


def time_facts(run: dict, timing: RunTiming) -> list[str]:
    """'ran 2 min 10 s', 'about 3 min 05 s left', '1.9 s per step' as they apply."""
    facts = []
    if timing.elapsed_s is not None:
        facts.append(("running for " if run["status"] in statuses.ACTIVE else "ran ") + speed.clock(timing.elapsed_s))
    if timing.eta_s is not None:
        facts.append(f"about {speed.clock(timing.eta_s)} left")
    elif run["status"] in statuses.ACTIVE:
        facts.append("time left: known after the first step")
    if timing.step_s is not None:
        facts.append(f"{timing.step_s:.1f} s per step")
    return facts


def usage_text(run: dict) -> str:
    """CPU and memory of the process training an active run on this machine (GPU memory when there is one)."""
    usage = _usage(run)
    if usage is None:
        return ""
    text = (
        f"CPU {usage['cpu_percent']:.0f}% of a core (machine {usage['machine_cpu_percent']:.0f}% busy, "
        f"{usage['cores']} cores) · RAM {paths.human_size(usage['rss_bytes'])}"
    )
    if "gpu_bytes" in usage:
        text += f" · GPU {paths.human_size(usage['gpu_bytes'])}"
    return text


def turn_text(run: dict) -> str:
    """ "taking turns: X is computing now" while another process on this machine holds the compute lease and this
    active run's process waits for it; empty otherwise."""
    if run["status"] not in statuses.ACTIVE or run.get("owner_host") not in (None, socket.gethostname()):
        return ""
    holder = compute_lease.holder_now()
    if holder is None or not run.get("owner_pid") or holder[1] == run["owner_pid"]:
        return ""
    return f"taking turns on the CPU: {holder[0]} is computing now (runs on this machine compute one at a time)"


def table_times(store, runs: list[dict]) -> dict[str, dict]:
    """The runs table's Time cell per run id ('12 min 05 s' a finished run took, '3 min 10 s left' of an active
    one, '42 s so far' before its first step), and Use: the CPU and memory of an active run's process
    ('CPU 104% of a core · RAM 1.2 GB', empty for other runs)."""
    cells = {}
    for run in runs:
        times = run_timing(store, run)
        usage = _usage(run)
        if run["status"] not in statuses.ACTIVE:
            time_text = speed.clock(times.elapsed_s)
        elif times.eta_s is not None:
            time_text = f"{speed.clock(times.eta_s)} left"
        else:
            time_text = f"{speed.clock(times.elapsed_s)} so far" if times.elapsed_s is not None else ""
        cells[run["run_id"]] = {
            "Time": time_text,
            "Use": f"CPU {usage['cpu_percent']:.0f}% of a core · RAM {paths.human_size(usage['rss_bytes'])}"
            if usage
            else "",
        }
    return cells


def _usage(run: dict) -> dict | None:
    """The live resource use of the process training an active run on this machine (None otherwise)."""
    if run["status"] not in statuses.ACTIVE or run.get("owner_host") not in (None, socket.gethostname()):
        return None
    return speed.process_usage(run.get("owner_pid"))


def eval_progress_text(job: dict, done: int) -> str:
    """'running: 87 of 240 examples · 2 min 10 s so far, about 3 min 50 s left' (the rate of this evaluation so
    far; 'time left: known after the first examples' before any is done)."""
    total = job["total"] or 0
    text = f"{job['status']}: {done} of {total} examples"
    elapsed = _seconds_between(job.get("started_at") or job.get("created_at"), None)
    if elapsed is None:
        return text
    text += f" · {speed.clock(elapsed)} so far"
    if done <= 0 or done >= total:
        return text + (", time left: known after the first examples" if done <= 0 else "")
    return text + f", about {speed.clock(elapsed / done * (total - done))} left"
