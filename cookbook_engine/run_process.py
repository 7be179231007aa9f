"""A run trained in a process of its own, started by the studio so that its steps share no interpreter lock with pages.

    python -m cookbook_engine.run_process RUN_ID --db STUDIO.duckdb --parent STUDIO_PID [--resume]

runs.RunManager with `child_processes` (the studio's) records the run (queued) and starts this; here the run's
settings are read back from the store, its data prepared again, and it trains to its end through `runs.execute`,
which claims the run (its owner pid is this process's) and records completed, cancelled or failed. A failure before
training starts (its data file gone, say) fails the run the same way. Cancelling goes through the store, as for every
run. Beside the training a watcher thread, every WATCH_EVERY_S:
- stops the run cleanly (after its current step, with a checkpoint, status cancelled) once the process that started
  it is gone, so a studio that closed or was killed leaves no run training forever;
- answers the chat's request for a snapshot of the live weights (runs.RunManager.live_snapshot_path): it saves the
  training client's current weights as sampler weights (one folder per run, replaced each time) and says where.

What it is not: a command for people (they use `cookbook sl|dpo|rl` and `cookbook resume`, which train in their own
process), nor a place for anything a loop does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from cookbook_engine import compute_lease, config as cfg, runs
from cookbook_engine.log import setup_logging
from cookbook_engine.training.context import RunContext
from cookbook_engine.training.run_logger import RunLogger
from storage import Store, statuses

WATCH_EVERY_S = 0.2
LIVE_SNAPSHOT_NAME = "live-snapshot"  # the sampler weights' name under the run's model folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cookbook_engine.run_process", description=__doc__.split("\n")[0])
    parser.add_argument("run_id")
    parser.add_argument("--db", required=True, help="the studio's database file")
    parser.add_argument("--parent", type=int, required=True, help="the pid of the studio that started the run")
    parser.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    args = parser.parse_args(argv)
    compute_lease.set_process_label(f"the studio's run {args.run_id}")
    setup_logging()
    store = Store(Path(args.db))
    run = store.get_run(args.run_id)
    if run is None:
        print(f"run {args.run_id}: not found in {args.db}", file=sys.stderr)
        return 2
    context = RunContext(
        args.run_id,
        store,
        RunLogger(store, args.run_id, Path(run["log_dir"])),
        Path(run["log_dir"]),
        resume=store.last_checkpoint(args.run_id) if args.resume else None,
        kind=run["kind"],
    )
    threading.Thread(target=_watch, args=(context, args.parent), name="run-watcher", daemon=True).start()
    try:
        config = cfg.from_dict(run["kind"], run["config"])
        prepared = runs.preflight(config, resuming=context.resume is not None)
        estimated = None if args.resume else runs.estimate_for(config, prepared)
    except BaseException as exc:  # recorded as the run's failure, as a failure while training is
        runs.record_failure(store, context, exc)
        return 1
    runs.execute(store, config, context, prepared, estimated)
    return 0 if store.run_status(args.run_id) in statuses.ENDED_AS_ASKED else 1


def _watch(context: RunContext, parent_pid: int) -> None:
    told = False
    while True:
        if os.getppid() != parent_pid and not told:  # the studio is gone (this process was handed to init)
            told = True
            context.note("the studio that started this run has closed: stopping after this step (resume it later)")
            context.cancel_event.set()
        _answer_snapshot_request(context)
        time.sleep(WATCH_EVERY_S)


def _answer_snapshot_request(context: RunContext) -> None:
    """Save the live weights for the chat if it asked (runs.LIVE_REQUEST holds its token), and answer with where
    they are (runs.LIVE_ANSWER), or why there are none."""
    request = context.log_dir / runs.LIVE_REQUEST
    try:
        token = request.read_text(encoding="utf-8").strip()
    except OSError:
        return
    request.unlink(missing_ok=True)
    answer: dict[str, str | None] = {"token": token}
    client = context.training_client
    if client is None:
        answer["error"] = "the run has no training client yet (it is loading its model)"
    else:
        from cookbook_engine.backends import compat

        try:
            saved = client.save_weights_for_sampler(LIVE_SNAPSHOT_NAME).result()
            path = compat.local_folder(client, saved.path)
            answer.update(path=path, folder=None if "://" in path else path)
        except Exception as exc:  # the run ended and freed its weights meanwhile: the chat uses what it saved
            answer["error"] = f"{type(exc).__name__}: {exc}"
    runs.write_atomically(context.log_dir / runs.LIVE_ANSWER, json.dumps(answer))


if __name__ == "__main__":
    sys.exit(main())
