"""The `cookbook eval`, `cookbook evals` and `cookbook sweep` commands (cli.py dispatches here).

    cookbook eval models=base,RUN_ID@20 evals=builtin:facts-probes max_examples=20 [--json]
    cookbook evals                      (list evaluation jobs)
    cookbook sweep FILE [--dry-run]     (train each configuration in turn, evaluate each, print one table)

Bad input exits with code 2 and a one-line reason; an evaluation that fails exits 1. Ctrl-C cancels.
"""

from __future__ import annotations

import json
import sys
import time

from cookbook_engine.exit_codes import bad_input as _bad_input
from storage import statuses
from storage.input_error import BAD_INPUT
from storage.statuses import RunStatus


def eval_command(args: list[str]) -> int:
    from cookbook_engine.evals import jobs

    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    try:
        prepared = jobs.prepare(jobs.parse_request(args))
    except BAD_INPUT as exc:
        return _bad_input(str(exc).splitlines()[0])
    manager = jobs.get_eval_manager()
    notes: list[str] = []
    eval_id = manager.start(prepared, echo=notes.append)
    print(
        f"evaluation {eval_id}: {len(prepared.targets)} models x {len(prepared.sets)} eval sets, "
        f"{prepared.total_examples} examples",
        file=sys.stderr,
    )
    job = follow(manager, eval_id, notes)
    print_results([eval_id], as_json)
    if job["status"] != RunStatus.COMPLETED:
        print(
            f"evaluation {eval_id}: {job['status']}" + (f" ({job['error']})" if job.get("error") else ""),
            file=sys.stderr,
        )
    return 0 if job["status"] in statuses.ENDED_AS_ASKED else 1


def follow(manager, eval_id: str, notes: list[str]) -> dict:
    """Print notes and progress (a bar on a terminal, sparse plain lines otherwise) until the job ends; Ctrl-C
    cancels it."""
    from cookbook_engine.progress import progress_display

    job = manager.store.get_job(eval_id)
    display = progress_display(sys.stderr, unit="examples")
    try:
        while manager.is_alive(eval_id):
            _drain(notes, display)
            display.update(manager.examples_done(eval_id) or 0, job["total"])
            time.sleep(0.5)
    except KeyboardInterrupt:
        display.write("cancelling the evaluation...")
        manager.cancel(eval_id)
    job = manager.wait(eval_id)
    display.update(job["done"], job["total"])
    display.close()
    _drain(notes, None)
    return job


def _drain(notes: list[str], display) -> None:
    while notes:
        line = notes.pop(0)
        display.write(line) if display is not None else print(line, file=sys.stderr)


def print_results(eval_ids: list[str], as_json: bool) -> None:
    from cookbook_engine.evals import report
    from storage.evals import EvalStore

    store = EvalStore()
    metrics = store.metrics(eval_ids)
    kinds = {row["eval_set"]: row["kind"] for row in store.results(eval_ids)}
    if as_json:
        print(json.dumps(metrics.drop(columns=["eval_id"]).to_dict(orient="records"), indent=2, default=str))
    else:
        print(report.print_leaderboard(metrics, kinds))


def list_evals() -> int:
    from storage.evals import EvalStore

    store = EvalStore()
    store.mark_orphans_interrupted()
    jobs = store.list_jobs()
    if not jobs:
        print("no evaluations yet: try `cookbook eval models=base evals=builtin:facts-probes`")
        return 0
    print(f"{'evaluation':30} {'status':11} {'done':>11}  models / eval sets")
    for job in jobs:
        done = f"{job['done']}/{job['total'] or '?'}"
        print(
            f"{job['eval_id']:30} {job['status']:11} {done:>11}  {','.join(job['models'])} / "
            f"{','.join(job['eval_sets'])}"
        )
    return 0


def sweep_command(args: list[str]) -> int:
    """`cookbook sweep FILE [--dry-run]` or `cookbook sweep --resume SWEEP_ID`."""
    from cookbook_engine.evals import sweeps

    dry_run = "--dry-run" in args
    args = [a for a in args if a != "--dry-run"]
    if len(args) == 2 and args[0] == "--resume":
        runner = sweeps.SweepRunner()
        try:
            sweep_id = runner.resume(args[1])
        except sweeps.SweepError as exc:
            return _bad_input(str(exc))
        return _follow_sweep(runner, sweep_id)
    if len(args) != 1:
        return _bad_input("usage: cookbook sweep FILE [--dry-run]  |  cookbook sweep --resume SWEEP_ID")
    try:
        plan = sweeps.plan(sweeps.load_file(args[0]), where=args[0])
    except BAD_INPUT as exc:
        return _bad_input(str(exc).splitlines()[0])
    if dry_run:
        keys = sweeps.varying_keys([{"settings": m.settings} for m in plan.members])
        print(
            f"{len(plan.members)} members, evaluated on {', '.join(plan.evals) or 'nothing'}; varying: "
            f"{', '.join(keys) or 'nothing'}"
        )
        for index, member in enumerate(plan.members):
            from cookbook_engine.config import to_command

            print(f"  {index}: {to_command(member.config)}")
        return 0
    runner = sweeps.SweepRunner()
    return _follow_sweep(runner, runner.start(plan))


def _follow_sweep(runner, sweep_id: str) -> int:
    from cookbook_engine.evals import sweeps

    print(f"sweep {sweep_id} (cookbook sweep --resume {sweep_id} continues it if stopped)", file=sys.stderr)
    try:
        while runner.is_alive(sweep_id):
            _drain(runner.notes, None)
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("cancelling the sweep (members in flight save a checkpoint)...", file=sys.stderr)
        runner.cancel(sweep_id)
    sweep = runner.wait(sweep_id)
    _drain(runner.notes, None)
    print(sweeps.table(runner.store, sweep_id).to_string(index=False))
    print(
        f"sweep {sweep_id}: {sweep['status']}" + (f" ({sweep['error']})" if sweep.get("error") else ""), file=sys.stderr
    )
    return 0 if sweep["status"] in statuses.ENDED_AS_ASKED else 1
