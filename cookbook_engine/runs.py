"""The RunManager: starts, cancels, resumes and watches runs, each on a background thread or in a child process.

A run is an asyncio loop (supervised, DPO or RL). The CLI's manager trains it on a daemon thread of its own process;
the studio's (`child_processes=True`) trains each run in a child process of its own (run_process.py), so a page
drawn in the studio never shares an interpreter lock with a training step; a thread here waits for that child and
records a crash as the run's failure. Either way the run is independent of any browser session, and everything
about it lives in storage (status, metrics, checkpoints) and in its run folder, so any process can watch it.
Cancelling works across processes: `cancel()` marks the run 'cancelling' in the database and the loop, which polls
its status between steps, saves a checkpoint and stops. The manager's store is a storage.Store: the database's owner
process runs its calls, so no training process opens the database. Resume restarts a stopped run from its last
saved state with its loop position. This module owns run life cycles; the loops themselves live in sl/loop.py,
dpo/loop.py and rl/loop.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from cookbook_engine import config as cfg, memory, paths, priority, secrets, shutdown, speed, trackers
from cookbook_engine.training import anchor, estimate
from cookbook_engine.training.context import RunContext as RunContext, step_line as step_line
from cookbook_engine.training.estimate import RunTime
from cookbook_engine.training.run_logger import RunLogger
from storage import RunStore, Store, statuses
from storage.statuses import RunStatus

ORPHAN_CHECK_EVERY_S = 2.0  # how often a running studio looks for runs whose process died
PROCESS_LOG = "process.log"  # a child process's stderr, in its run folder (a crash's last words)
LIVE_REQUEST, LIVE_ANSWER = "live-snapshot.request", "live-snapshot.json"  # in the run folder (run_process.py)
LIVE_SNAPSHOT_WAIT_S = 120.0  # a snapshot waits at most for the training operation in flight (one step or less)

logger = logging.getLogger(__name__)


class RunCancelled(Exception):
    """Raised inside a loop when its run was asked to stop."""


def new_run_id(kind: str) -> str:
    return f"{kind}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def loop_module(kind: str) -> ModuleType:
    """The module of a run kind's loop, with its prepare(), plan() and train()."""
    if kind == "sl":
        from cookbook_engine.sl import loop as sl_loop

        return sl_loop
    if kind == "dpo":
        from cookbook_engine.dpo import loop as dpo_loop

        return dpo_loop
    if kind == "rl":
        from cookbook_engine.rl import loop as rl_loop

        return rl_loop
    if kind == "distill":
        from cookbook_engine.distill import loop as distill_loop

        return distill_loop
    raise cfg.ConfigError(f"unknown run kind {kind!r}")


def preflight(config: cfg.CommonConfig, resuming: bool = False) -> Any:
    """All checks that can fail on bad input, before anything is written: settings, checkpoints, model, renderer,
    data. Returns what the loop prepared (e.g. the tokenized dataset) so it is not done twice. A run `resuming` from
    its own checkpoint no longer needs its start checkpoint."""
    cfg.check(config)
    problems = checkpoint_problems(config, resuming)
    if problems:
        raise cfg.ConfigError("\n".join(problems))
    paths.home()  # an unwritable home folder fails here, with its own clear message
    prepared = loop_module(config.kind).prepare(config)
    anchor.conversations(config)  # a bad anchor.dataset fails here, naming the setting
    memory.check_fits(config, prepared)  # a run that would not fit in memory says so now, not when it swaps or dies
    return prepared


def checkpoint_problems(config: cfg.CommonConfig, resuming: bool = False) -> list[str]:
    """Each checkpoint the settings name (start_checkpoint, a distillation teacher, an RL KL reference) that is not on
    this machine, on the local backend: refused before a run exists, not found when the run loads it. Hosted
    checkpoints (backend=tinker) are the service's to check. A run `resuming` from its own checkpoint starts from
    that, so its start_checkpoint may be gone."""
    if config.backend != "local":
        return []
    from cookbook_engine.backends import compat

    keys = ("teacher", "kl_reference") if resuming else ("start_checkpoint", "teacher", "kl_reference")
    named = {key: str(getattr(config, key, "") or "").strip() for key in keys}
    problems = []
    for key, path in named.items():
        if not path or path in ("base", config.model):
            continue
        try:
            there = compat.holds_checkpoint(path)
        except ValueError as exc:  # a malformed tinker:// path
            problems.append(f"{key}={path}: {exc}")
            continue
        if not there:
            problems.append(
                f"{key}={path}: no checkpoint there (a checkpoint folder holds {compat.ADAPTER_WEIGHTS}; the "
                "Checkpoints page lists each one's path)"
            )
    return problems


class RunManager:
    """Starts runs on threads of this process, or each in a child process with `child_processes` (the studio's);
    the setting applies to the runs started after it is set, and every method works for both kinds of run."""

    def __init__(self, store: RunStore | None = None, *, child_processes: bool = False):
        self.store = store or Store.default()
        self.child_processes = child_processes
        self._threads: dict[str, threading.Thread] = {}  # a run's training thread, or the thread waiting on its child
        self._contexts: dict[str, RunContext] = {}
        self._children: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._orphans_checked_at = time.monotonic()
        self.store.mark_orphans_interrupted()

    # --- life cycle -----------------------------------------------------------------------------------------
    def start(
        self,
        config: cfg.CommonConfig,
        *,
        prepared: Any = None,
        parent_run_id: str | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> str:
        """Validate, record and start a run in the background; returns its id. Bad input raises before any write."""
        if prepared is None:
            prepared = preflight(config)
        run_id = new_run_id(config.kind)
        log_dir = paths.run_dir(run_id)
        name = config.name or run_id
        parent_checkpoint = getattr(config, "start_checkpoint", "") or None
        if parent_checkpoint and parent_run_id is None:
            parent_run_id = self._run_of_checkpoint(parent_checkpoint)
        try:
            self.store.create_run(
                run_id,
                name=name,
                kind=config.kind,
                backend=config.backend,
                base_model=config.model,
                config=cfg.to_dict(config),
                log_dir=str(log_dir),
                parent_run_id=parent_run_id,
                parent_checkpoint=parent_checkpoint,
            )
            context = RunContext(
                run_id, self.store, RunLogger(self.store, run_id, log_dir), log_dir, echo=echo, kind=config.kind
            )
            context.logger.write_config({"kind": config.kind, **cfg.to_dict(config)})
        except OSError as exc:  # a full or read-only disk: leave nothing half-made behind
            self._forget(run_id, log_dir)
            raise paths.HomeError(
                f"studio home {paths.home()}: {exc.strerror or exc} while creating run "
                f"{run_id}; free some space or set COOKBOOK_HOME elsewhere"
            ) from exc
        if self.child_processes:
            self._launch_child(run_id, log_dir, fresh=True)
        else:
            self._launch(config, context, prepared, estimate_for(config, prepared))
        return run_id

    def resume(self, run_id: str, echo: Callable[[str], None] | None = None) -> str:
        run = self.store.get_run(run_id)
        if run is None:
            raise KeyError(f"run {run_id}: not found")
        if run["status"] in statuses.ACTIVE and self.is_alive(run_id):
            raise ValueError(f"run {run_id}: still {run['status']}")
        if run["status"] == RunStatus.COMPLETED:
            raise ValueError(f"run {run_id}: already completed")
        config = cfg.from_dict(run["kind"], run["config"])
        checkpoint = self.store.last_checkpoint(run_id)
        context = RunContext(
            run_id,
            self.store,
            RunLogger(self.store, run_id, Path(run["log_dir"])),
            Path(run["log_dir"]),
            resume=checkpoint,
            echo=echo,
            kind=run["kind"],
        )
        prepared = preflight(config, resuming=checkpoint is not None)
        step = int(checkpoint["step"]) if checkpoint else 0
        context.logger.truncate_after(step - 1)  # metrics of steps after the checkpoint are redone
        self.store.update_run(
            run_id, status=RunStatus.QUEUED, error=None, traceback=None, finished_at=None, owner_pid=None
        )
        if self.child_processes:
            self._launch_child(run_id, Path(run["log_dir"]), fresh=False)
        else:
            self._launch(config, context, prepared)
        return run_id

    def cancel(self, run_id: str) -> None:
        """Ask a run to stop after its current step (it saves a checkpoint first, so it can be resumed)."""
        with self._lock:
            context = self._contexts.get(run_id)
        if context is not None:
            context.cancel_event.set()
        run = self.store.get_run(run_id)
        if run and run["status"] in statuses.STOPPABLE:
            self.store.update_run(run_id, status=RunStatus.CANCELLING)

    def files_of(self, run_id: str) -> list[Path]:
        """What deleting the run removes from disk: its run folder, its local checkpoint folders that no other run
        records (a run started from another's checkpoint shares it), and the exports made from its checkpoints."""
        run = self.store.get_run(run_id)
        if run is None:
            return []
        mine = {
            p
            for c in self.store.list_checkpoints(run_id)
            for p in (c.get("state_path"), c.get("sampler_path"))
            if p and "://" not in p
        }
        others = {
            p
            for c in self.store.list_checkpoints()
            if c["run_id"] != run_id
            for p in (c.get("state_path"), c.get("sampler_path"))
            if p
        }
        others |= {
            (r.get("config") or {}).get("start_checkpoint") for r in self.store.list_runs() if r["run_id"] != run_id
        }
        from cookbook_engine import export

        files = [Path(run["log_dir"])] if run.get("log_dir") else []
        files += [Path(p) for p in sorted(mine - others)]
        if run.get("log_dir"):  # the live snapshot a chat asked of its child process, if any
            snapshot = _read_answer(Path(run["log_dir"]) / LIVE_ANSWER).get("folder")
            files += [Path(snapshot)] if snapshot else []
        files += [row["path"] for row in export.exports_of(mine)]
        return [path for path in files if path.exists()]

    def delete(self, run_id: str) -> int:
        """Delete the run's records and its files (see `files_of`); returns the bytes freed."""
        if self.is_alive(run_id):
            raise ValueError(f"run {run_id}: stop it before deleting it")
        import shutil

        from cookbook_engine import export

        files = self.files_of(run_id)
        freed = sum(paths.size_of(path) for path in files)
        self.store.delete_run(run_id)
        for path in files:
            if path.parent == export.exports_dir():
                export.delete_export(path)
            elif path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                _remove_empty_parents(path.parent, paths.home() / "checkpoints")
            else:
                path.unlink(missing_ok=True)
        return freed

    def wait(self, run_id: str, timeout: float | None = None) -> dict:
        thread = self._threads.get(run_id)
        if thread is not None:
            thread.join(timeout)
        run = self.store.get_run(run_id)
        if run is None:
            raise KeyError(f"run {run_id}: not found (was it deleted?)")
        return run

    def is_alive(self, run_id: str) -> bool:
        thread = self._threads.get(run_id)
        return thread is not None and thread.is_alive()

    def live_training_client(self, run_id: str) -> Any:
        """The training client of a run training on a thread of this process right now; None when it trains in
        another process (a child of this one, or the CLI), has not started its client yet, or has ended."""
        with self._lock:
            context = self._contexts.get(run_id)
        return None if context is None else context.training_client

    def live_snapshot_path(self, run_id: str, timeout_s: float = LIVE_SNAPSHOT_WAIT_S) -> str | None:
        """Sampler weights of a run training in a child process of this one, saved by that process on request
        (run_process.py answers between two operations of its training client): their path, or None when the run
        is not a live child of this one or has no training client yet. The snapshot is one folder per run, replaced
        by the next one and deleted with the run; it is not a checkpoint of the run."""
        with self._lock:
            child = self._children.get(run_id)
        run = self.store.get_run(run_id)
        if child is None or child.poll() is not None or run is None:
            return None
        folder = Path(run["log_dir"])
        token = uuid.uuid4().hex
        write_atomically(folder / LIVE_REQUEST, token)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and child.poll() is None:
            answer = _read_answer(folder / LIVE_ANSWER)
            if answer.get("token") == token:
                return answer.get("path")
            time.sleep(0.1)
        return None

    def stop_children(self, timeout_s: float) -> None:
        """Ask every run training in a child process to stop (each saves a checkpoint first) and wait up to
        `timeout_s` in all; the studio does this as it closes. A child still training after that stops by itself
        after its current step, as it does whenever the process that started it is gone (run_process.py)."""
        with self._lock:
            alive = [run_id for run_id, child in self._children.items() if child.poll() is None]
        for run_id in alive:
            self.cancel(run_id)
        deadline = time.monotonic() + timeout_s
        for run_id in alive:
            self.wait(run_id, max(0.0, deadline - time.monotonic()))

    def active_run_ids(self) -> list[str]:
        return [run_id for run_id, thread in list(self._threads.items()) if thread.is_alive()]

    def notice_orphans(self, every_s: float = ORPHAN_CHECK_EVERY_S) -> list[str]:
        """Mark runs whose owner process died (a killed CLI run, say) as interrupted, at most once per `every_s`
        seconds: a long-lived studio calls this on every page render, so a dead run never stays 'running'."""
        now = time.monotonic()
        with self._lock:
            if now - self._orphans_checked_at < every_s:
                return []
            self._orphans_checked_at = now
        return self.store.mark_orphans_interrupted()

    # --- internals ------------------------------------------------------------------------------------------
    def _forget(self, run_id: str, log_dir: Path) -> None:
        import shutil

        try:
            self.store.delete_run(run_id)
        except Exception:
            logger.exception("run %s: its rows could not be deleted; removing its folder anyway", run_id)
        shutil.rmtree(log_dir, ignore_errors=True)

    def _run_of_checkpoint(self, path: str) -> str | None:
        for row in self.store.list_checkpoints():
            if path in (row.get("state_path"), row.get("sampler_path")):
                return row["run_id"]
        return None

    def _launch(
        self, config: cfg.CommonConfig, context: RunContext, prepared: Any, estimated: RunTime | None = None
    ) -> None:
        """Train on a background thread; a run started afresh with an `estimated` time records how it measured
        against it when it completes (a resumed run's time covers only part of its steps, so it records nothing)."""
        thread = threading.Thread(
            target=self._execute,
            args=(config, context, prepared, estimated),
            name=f"run:{context.run_id}",
            daemon=True,
        )
        with self._lock:
            self._threads[context.run_id] = thread
            self._contexts[context.run_id] = context
        priority.start(thread)  # a run started from a page trains at the studio's priority, not the page's

    def _launch_child(self, run_id: str, log_dir: Path, *, fresh: bool) -> None:
        """Train the run in a child process (run_process.py), at this process's priority (not a page thread's), with
        a thread here that waits for it. The child stays in the studio's session but gets a process group of its own:
        a Ctrl-C at the terminal reaches the studio's group only (the studio stops its children), and Linux weighs
        CPU time per session (autogroup), so the child competes with the studio's page threads at their nice +10, not
        as a second equal group. In a session of its own, ten pages loading made a 0.6 s step take 12 s (2026-11-27).
        """
        command = [sys.executable, "-m", "cookbook_engine.run_process", run_id, "--db", str(self.store.path)]
        command += ["--parent", str(os.getpid())] + ([] if fresh else ["--resume"])
        try:
            with open(log_dir / PROCESS_LOG, "ab") as stderr:
                child = priority.at_process_priority(
                    lambda: subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=stderr,
                        stderr=stderr,
                        process_group=0,
                        env=_child_environment(),
                    )
                )
        except OSError as exc:  # no run is left queued with nothing to train it
            message = f"its training process could not be started: {exc}"
            self.store.update_run(run_id, status=RunStatus.FAILED, error=message, finished_at=datetime.now(UTC))
            raise paths.HomeError(f"run {run_id}: {message}") from exc
        thread = threading.Thread(target=self._await_child, args=(run_id, child), name=f"run:{run_id}", daemon=True)
        with self._lock:
            self._children[run_id] = child
            self._threads[run_id] = thread
        shutdown.register("runs in child processes", shutdown.RUNS, self.stop_children)
        priority.start(thread)

    def _await_child(self, run_id: str, child: subprocess.Popen) -> None:
        """Wait for the run's process; one that ended without recording how the run ended (killed, out of memory,
        a crash in native code) leaves the run failed, with its exit code and the last line it wrote."""
        code = child.wait()
        run = self.store.get_run(run_id)
        if run is None or run["status"] not in (*statuses.ACTIVE, RunStatus.INTERRUPTED):
            return
        last = _last_line(Path(run["log_dir"]) / PROCESS_LOG)
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        message = f"its training process {child.pid} ended ({how}) without finishing the run" + (
            f": {last}" if last else ""
        )
        message = secrets.redact(message)
        self.store.update_run(run_id, status=RunStatus.FAILED, error=message, finished_at=datetime.now(UTC))

    def _execute(
        self, config: cfg.CommonConfig, context: RunContext, prepared: Any, estimated: RunTime | None = None
    ) -> None:
        try:
            execute(self.store, config, context, prepared, estimated)
        finally:
            with self._lock:
                self._contexts.pop(context.run_id, None)


def execute(
    store: RunStore, config: cfg.CommonConfig, context: RunContext, prepared: Any, estimated: RunTime | None = None
) -> None:
    """Train the run to its end in this thread and record how it ended: completed, cancelled, or failed with its
    error (never raises: a failing run must not take its process down)."""
    run_id = context.run_id
    status: str = RunStatus.FAILED
    try:
        store.claim_run(run_id)
        _open_trackers(config, context, store.get_run(run_id))
        asyncio.run(loop_module(config.kind).train(config, context, prepared))
        # a stop asked for after the last step still leaves a completed run
        stopped_early = context.cancel_event.is_set() and not _all_steps_done(store.get_run(run_id))
        status = RunStatus.CANCELLED if stopped_early else RunStatus.COMPLETED
        store.update_run(run_id, status=status, finished_at=datetime.now(UTC))
        context.note(f"run {status}")
        if status == RunStatus.COMPLETED and estimated is not None:
            _record_speed(store, run_id, config, estimated)
    except RunCancelled:
        status = RunStatus.CANCELLED
        store.update_run(run_id, status=RunStatus.CANCELLED, finished_at=datetime.now(UTC))
        context.note("run cancelled")
    except BaseException as exc:  # a failing run must never take the process down with it
        record_failure(store, context, exc)
    finally:
        context.logger.close(status)


def record_failure(store: RunStore, context: RunContext, exc: BaseException) -> None:
    """Mark the run failed with `exc` (its message and the traceback being handled), and say so in its log."""
    message = secrets.redact(f"{type(exc).__name__}: {exc}")
    try:
        store.update_run(
            context.run_id,
            status=RunStatus.FAILED,
            error=message,
            traceback=secrets.redact(traceback.format_exc()),
            finished_at=datetime.now(UTC),
        )
        context.note(f"run failed: {message}")
    except Exception:
        logger.exception("run %s failed (%s) and the failure could not be recorded", context.run_id, message)


def _child_environment() -> dict[str, str]:
    """This process's environment, with this checkout first on the import path (a studio started with
    `streamlit run` from a plain checkout imports the engine from there, and so does its runs' process)."""
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + rest if rest else "")}


def _last_line(path: Path) -> str:
    """The last non-empty line of a text file (at most its last 4 KB are read); empty when there is none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4096))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def write_atomically(path: Path, text: str) -> None:
    """Write a small file so that a reader sees either the old or the new text, never half of it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _read_answer(path: Path) -> dict:
    try:
        answer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return answer if isinstance(answer, dict) else {}


def estimate_for(config: cfg.CommonConfig, prepared: Any) -> RunTime | None:
    """The New run form's estimate for a local run, before any correction from earlier runs (None for hosted runs,
    or when it cannot be made: the run starts all the same)."""
    if config.backend != "local":
        return None
    try:
        plan = loop_module(config.kind).plan(config, prepared)
        return estimate.run_time(config, prepared, plan, speed.speeds(config.model))
    except Exception:
        logger.info("no time estimate for this %s run; it will not record its speed", config.kind, exc_info=True)
        return None


def _record_speed(store: RunStore, run_id: str, config: cfg.CommonConfig, estimated: RunTime) -> None:
    """Keep the completed run's seconds per step against its estimate (training/estimate.py); a store that cannot
    keep it loses only the next estimate's correction."""
    try:
        run = store.get_run(run_id)
        if run is not None:
            estimate.record_finished(store, run, config, estimated)
    except Exception:
        logger.warning("run %s: its step speed was not recorded", run_id, exc_info=True)


def _open_trackers(config: cfg.CommonConfig, context: RunContext, run: dict | None) -> None:
    """Start the experiment trackers the run names (log_to, wandb_project), with its settings."""
    names = trackers.requested(config.log_to, config.wandb_project)
    if not names:
        return
    settings = trackers.TrackerSettings(
        names=tuple(names),
        run_id=context.run_id,
        run_name=(run or {}).get("name") or config.name or context.run_id,
        kind=config.kind,
        log_dir=context.log_dir,
        wandb_project=config.wandb_project,
        wandb_name=config.wandb_name,
        mlflow_tracking_uri=config.mlflow_tracking_uri,
        mlflow_experiment=config.mlflow_experiment,
    )
    context.logger.open_trackers(
        settings, {"run_id": context.run_id, "kind": config.kind, **cfg.to_dict(config)}, context.note
    )


def _all_steps_done(run: dict | None) -> bool:
    return bool(run and run.get("total_steps") and (run.get("step") or 0) >= run["total_steps"])


def _remove_empty_parents(folder: Path, stop_at: Path) -> None:
    """Remove `folder` and its parents while they are empty, up to (not including) `stop_at`."""
    folder, stop_at = folder.resolve(), stop_at.resolve()
    while folder != stop_at and stop_at in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


_manager: RunManager | None = None
_manager_lock = threading.Lock()


def get_manager(child_processes: bool | None = None) -> RunManager:
    """The process-wide RunManager (the studio and the CLI each have one). `child_processes`: True for the studio
    (its runs train in child processes), False for the CLI (in this process); None keeps what the process has."""
    global _manager
    with _manager_lock:
        if _manager is None or _manager.store.path != paths.db_path().resolve():
            _manager = RunManager()
        if child_processes is not None:
            _manager.child_processes = child_processes
        return _manager
