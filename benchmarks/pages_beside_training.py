"""A training step's time with ten studio pages loading beside it (issue 27, item 13).

The studio draws pages on Streamlit's script threads and trains each run in a child process of its own (runs.py,
run_process.py; before, the run trained on a thread of the studio's process). This script does the same in one
process: it starts a short SL run on the default model through the studio's RunManager (as the New run form does),
then measures the run's step times (from its `time/total` metric) in phases of `--steps` steps: no pages loading;
ten pages loading in parallel and again as each finishes (Streamlit's AppTest, the same page scripts) as the studio
draws them (page slot on, pages at nice 10: cookbook_engine/priority.py); the same with neither (slot off, nice 0);
and one page at a time, the ten in turn, as a person clicks through the studio (slot on, nice 10). The settings
alternate within each of `--rounds` rounds. After the run is stopped, the same one-page-at-a-time loads with no run
training give the idle page time. It prints each setting's step times, page load times and load average as JSON.

    flock /work/wt/heavy.lock .venv/bin/python benchmarks/pages_beside_training.py --steps 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = ["home", "runs", "run", "chat", "evaluate", "sweeps", "datasets", "checkpoints", "compare", "transcripts"]


def load_page(page: str, run_id: str) -> float:
    from streamlit.testing.v1 import AppTest

    started = time.perf_counter()
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=300)
    at.run()
    if page != "home":
        if page in ("run", "checkpoints"):
            at.query_params["run"] = run_id
        at.switch_page(f"../pages/{page}.py").run()
    return time.perf_counter() - started


def step_times(store, run_id: str, after_step: int, steps: int, timeout_s: float = 600) -> list[float]:
    """Durations of the `steps` steps after `after_step`, waiting for them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = store.get_metrics(run_id, ["time/total"])
        points = sorted(zip(frame["step"].astype(int), frame["value"].astype(float)))
        later = [(s, t) for s, t in points if s >= after_step]
        if len(later) > steps:
            return [b - a for (_, a), (_, b) in zip(later, later[1:])][:steps]
        time.sleep(0.5)
    raise TimeoutError("the run did not reach the steps in time")


def last_step(store, run_id: str) -> int:
    frame = store.get_metrics(run_id, ["time/total"])
    return int(frame["step"].max()) if len(frame) else -1


def phase(store, run_id: str, steps: int, page_threads: int, slots: str, nice: str) -> dict:
    """`steps` step times of the run while `page_threads` threads load pages without pause: ten, each its own page;
    one, the ten pages in turn; none."""
    os.environ["COOKBOOK_PAGE_SLOTS"] = slots
    os.environ["COOKBOOK_PAGE_NICE"] = nice
    stop = threading.Event()
    loads: list[float] = []

    def keep_loading(pages: list[str]) -> None:
        while not stop.is_set():
            for page in pages:
                loads.append(load_page(page, run_id))

    groups = [[page] for page in PAGES] if page_threads == len(PAGES) else [PAGES] * page_threads
    workers = [threading.Thread(target=keep_loading, args=(group,), daemon=True) for group in groups]
    start = last_step(store, run_id)
    for worker in workers:
        worker.start()
    durations = step_times(store, run_id, start + 1, steps)  # the step in flight when pages start is left out
    stop.set()
    for worker in workers:
        worker.join(timeout=300)
    return {
        "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
        "page_threads": page_threads,
        "page_slot": slots != "0",
        "page_nice": int(nice),
        "step_s": [round(d, 2) for d in durations],
        "page_load_s": loads,
    }


def summary(phases: list[dict]) -> dict:
    """One setting's phases (one per round) together."""
    steps = [d for p in phases for d in p["step_s"]]
    loads = [x for p in phases for x in p.pop("page_load_s")]
    return {
        **{k: phases[0][k] for k in ("page_threads", "page_slot", "page_nice")},
        "loadavg_after": [p["loadavg_after"] for p in phases],
        "step_s": steps,
        "median_step_s": round(statistics.median(steps), 2),
        "max_step_s": round(max(steps), 2),
        "page_loads": len(loads),
        "median_page_load_s": round(statistics.median(loads), 2) if loads else None,
        "max_page_load_s": round(max(loads), 2) if loads else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="steps measured per phase")
    parser.add_argument("--rounds", type=int, default=2, help="times each setting is measured, interleaved")
    options = parser.parse_args()
    os.environ.setdefault("COOKBOOK_HOME", tempfile.mkdtemp(prefix="pages-beside-training-"))
    from cookbook_engine import models
    from cookbook_engine.config import SLConfig
    from cookbook_engine.runs import get_manager

    loadavg_before = Path("/proc/loadavg").read_text().split()[:3]
    models.prepare_default_model()
    manager = get_manager(child_processes=True)  # the studio's: the run trains in a child process
    config = SLConfig(max_steps=200, batch_size=4, save_every=0, eval_every=0, name="beside-pages")
    run_id = manager.start(config)
    store = manager.store
    step_times(store, run_id, 0, 1)  # loaded and past the first step
    trained_in = (store.get_run(run_id) or {}).get("owner_pid")
    settings = [  # (page threads, slot, nice): no pages; ten as the studio draws them; ten with neither; one
        (0, "1", "10"),
        (len(PAGES), "1", "10"),
        (len(PAGES), "0", "0"),
        (1, "1", "10"),
    ]
    rounds = [  # interleaved, so a change in the machine's load falls on every setting alike
        [phase(store, run_id, options.steps, threads, slots, nice) for threads, slots, nice in settings]
        for _ in range(options.rounds)
    ]
    results = [summary([round_[i] for round_ in rounds]) for i in range(len(settings))]
    manager.cancel(run_id)
    manager.wait(run_id, timeout=120)
    idle = [load_page(page, run_id) for page in PAGES * options.rounds]  # one at a time, nothing training
    results.append({"page_threads": 1, "training": False, "page_loads": len(idle), "page_load_s": idle})
    results[-1] |= {"median_page_load_s": round(statistics.median(idle), 2), "max_page_load_s": round(max(idle), 2)}
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    bf16 = any("avx512_bf16" in line for line in lines if line.startswith("flags"))
    report = {"cpu": cpu, "avx512_bf16": bf16, "cpu_count": os.cpu_count(), "loadavg_before": loadavg_before}
    report["pages_pid"], report["training_pid"] = os.getpid(), trained_in
    print(json.dumps({**report, "phases": results}, indent=1))


if __name__ == "__main__":
    main()
