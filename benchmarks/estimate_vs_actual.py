"""The New run form's time estimate against the run it estimated (issue 27, item 11).

For each run (an SL run and an RL run on the default model, at the form's defaults unless `--short`), this script
calibrates this machine's speeds (as the form does in the background), builds the estimate the form shows ("Check
settings": app/forms.py `estimate`, the seconds from cookbook_engine/speed.py), starts the run through the
RunManager exactly as the form's Start does (a background thread of this process), waits for it, and prints as JSON
the estimate, the time the Run page reports (started_at to finished_at) and where that time went: before the first
step, the steps, the evaluations (`time/eval`), and after the last step (final evaluation and checkpoint).

Each kind runs `--repeat` times in one studio home, so every run after the first has the earlier ones to learn from:
`calibrated_estimate_s` is the estimate from the calibration alone (training/estimate.py `run_time`, as before
issue 27's correction), `estimated_s` the form's, scaled by what the earlier runs of this kind measured against
theirs (`correction`).

    flock /work/wt/heavy.lock .venv/bin/python benchmarks/estimate_vs_actual.py [--short] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def machine() -> dict:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg": Path("/proc/loadavg").read_text().split()[:3]}


def estimated_seconds(text: str) -> float:
    """The seconds in the estimate's 'roughly 2.3 min' / 'roughly 45 s'."""
    match = re.search(r"roughly (?:up to )?([\d.]+) (min|s)\b", text)
    if not match:
        raise ValueError(f"no time in the estimate: {text}")
    return float(match.group(1)) * (60 if match.group(2) == "min" else 1)


def previous_estimate_s(config, prepared) -> float | None:
    """The estimate before issue 27's fix, for comparison: tokens over the speeds measured the old way (a batch of 2,
    4 replies; the cache file speed-compute-*.json, when an earlier calibration left one), plus 10 s, with no
    RL evaluations, prompt tokens or checkpoint saves."""
    from cookbook_engine import models, speed
    from cookbook_engine.runs import loop_module
    from cookbook_engine.training import estimate

    old = Path(os.environ["COOKBOOK_MODEL_CACHE"]) / f"speed-compute-{models.DEFAULT_MODEL.replace('/', '--')}.json"
    if not old.exists():
        return None
    rate = speed.Speeds(**{k: v for k, v in json.loads(old.read_text()).items() if k != "single_sample_tok_s"})
    plan = loop_module(config.kind).plan(config, prepared)
    if config.kind == "rl":
        return plan.tokens / rate.sample_tok_s + plan.tokens / rate.train_tok_s + 10.0
    evals = (plan.total_steps // config.eval_every if config.eval_every else 0) + 1
    held_out = estimate.datum_tokens(getattr(prepared, "test", None) or [])
    return plan.tokens / rate.train_tok_s + evals * held_out / rate.eval_tok_s + 10.0


def breakdown(store, run: dict) -> dict:
    """Where the run's time went, from its metrics: time/total is seconds since the loop started at each step."""
    frame = store.get_metrics(run["run_id"])
    total = frame[frame["name"] == "time/total"].sort_values("step")
    evals = frame[frame["name"] == "time/eval"]
    elapsed = (run["finished_at"] - run["started_at"]).total_seconds()
    first_step_end = float(total["value"].iloc[0]) if len(total) else 0.0
    last_step_end = float(total["value"].iloc[-1]) if len(total) else 0.0
    step_times = total["value"].diff().dropna()
    return {
        "ran_s": round(elapsed, 1),
        "loop_start_to_last_step_s": round(last_step_end, 1),
        "first_step_s": round(first_step_end, 1),
        "median_later_step_s": round(float(step_times.median()), 2) if len(step_times) else None,
        "evaluations": len(evals),
        "eval_s": [round(float(v), 1) for v in evals["value"]],
        "steps": int(total["step"].max()) + 1 if len(total) else 0,
    }


def measure(config) -> dict:
    from app import forms
    from cookbook_engine import runs, speed
    from cookbook_engine.runs import get_manager
    from cookbook_engine.training import estimate

    prepared = runs.preflight(config)
    text = forms.estimate(config, prepared)
    previous = previous_estimate_s(config, prepared)
    plan = runs.loop_module(config.kind).plan(config, prepared)
    calibrated = estimate.run_time(config, prepared, plan, speed.speeds(config.model)).total
    manager = get_manager()
    learned = estimate.correction(manager.store, config)
    before = machine()
    clicked = time.monotonic()
    run_id = manager.start(config)
    manager.wait(run_id, timeout=3600)
    wall = time.monotonic() - clicked
    run = manager.store.get_run(run_id)
    log_lines = (Path(os.environ["COOKBOOK_HOME"]) / "runs" / run_id / "log.txt").read_text().splitlines()
    return {
        "kind": config.kind,
        "status": run["status"],
        "estimate": text,
        "estimated_s": estimated_seconds(text),
        "calibrated_estimate_s": round(calibrated, 1),
        "learned_from": learned.describe() if learned else None,
        "previous_formula_estimated_s": round(previous, 1) if previous is not None else None,
        "start_click_to_done_s": round(wall, 1),
        **breakdown(manager.store, run),
        "speeds": speed.speeds(config.model).__dict__,
        "machine_before": before,
        "machine_after": machine(),
        "log": log_lines[:3] + ["..."] + log_lines[-4:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="a 10-step SL run and a 3-step RL run")
    parser.add_argument("--kinds", default="sl,rl")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each kind, one after another")
    options = parser.parse_args()
    os.environ.setdefault("COOKBOOK_HOME", tempfile.mkdtemp(prefix="estimate-vs-actual-"))
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(REPO / ".test-cache" / "models"))
    from cookbook_engine import models, speed
    from cookbook_engine.config import RLConfig, SLConfig

    models.prepare_default_model()
    speed.calibrate()
    configs = {
        "sl": SLConfig(dataset="builtin:facts", max_steps=10 if options.short else 0, name="estimate-sl"),
        "rl": RLConfig(env="arithmetic", max_steps=3 if options.short else 12, name="estimate-rl"),
    }
    results = [measure(configs[kind]) for kind in options.kinds.split(",") for _ in range(options.repeat)]
    print(json.dumps({"machine": machine(), "runs": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
