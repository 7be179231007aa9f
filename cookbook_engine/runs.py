"""The RunManager: starts, cancels, resumes and watches runs, each on its own background thread.

A run is an asyncio loop (supervised, DPO or RL) running on a daemon thread of this process, independent of any
browser session. Everything about it lives in storage (status, metrics, checkpoints) and in its run folder, so any
process can watch it. Cancelling works across processes: `cancel()` marks the run 'cancelling' in the database and
the loop, which polls its status between steps, saves a checkpoint and stops. The manager's store is a
storage.Store: the database's owner process runs its calls, so the training process never opens the database.
Resume restarts a stopped run from its last saved state with its loop position. This module owns run life cycles;
the loops themselves live in sl/loop.py, dpo/loop.py and rl/loop.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from cookbook_engine import config as cfg, memory, paths, priority, secrets, speed, trackers
from cookbook_engine.training import estimate
from cookbook_engine.training.context import RunContext as RunContext, step_line as step_line
from cookbook_engine.training.estimate import RunTime
from cookbook_engine.training.run_logger import RunLogger
from storage import RunStore, Store, statuses
from storage.statuses import RunStatus

ORPHAN_CHECK_EVERY_S = 2.0  # how often a running studio looks for runs whose process died

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


def preflight(config: cfg.CommonConfig) -> Any:
    """All checks that can fail on bad input, before anything is written: settings, model, renderer, data.
    Returns what the loop prepared (e.g. the tokenized dataset) so it is not done twice."""
    cfg.check(config)
    paths.home()  # an unwritable home folder fails here, with its own clear message
    prepared = loop_module(config.kind).prepare(config)
    memory.check_fits(config, prepared)  # a run that would not fit in memory says so now, not when it swaps or dies
    return prepared


class RunManager:
    def __init__(self, store: RunStore | None = None):
        self.store = store or Store.default()
        self._threads: dict[str, threading.Thread] = {}
        self._contexts: dict[str, RunContext] = {}
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
        self._launch(config, context, prepared, _estimate(config, prepared))
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
        prepared = preflight(config)
        step = int(checkpoint["step"]) if checkpoint else 0
        context.logger.truncate_after(step - 1)  # metrics of steps after the checkpoint are redone
        self.store.update_run(
            run_id, status=RunStatus.QUEUED, error=None, traceback=None, finished_at=None, owner_pid=None
        )
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
        """The training client of a run training in this process right now; None when it trains in another
        process (e.g. the CLI), has not started its client yet, or has ended."""
        with self._lock:
            context = self._contexts.get(run_id)
        return None if context is None else context.training_client

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

    def _execute(
        self, config: cfg.CommonConfig, context: RunContext, prepared: Any, estimated: RunTime | None = None
    ) -> None:
        store, run_id = self.store, context.run_id
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
            message = secrets.redact(f"{type(exc).__name__}: {exc}")
            try:
                store.update_run(
                    run_id,
                    status=RunStatus.FAILED,
                    error=message,
                    traceback=secrets.redact(traceback.format_exc()),
                    finished_at=datetime.now(UTC),
                )
                context.note(f"run failed: {message}")
            except Exception:
                logger.exception("run %s failed (%s) and the failure could not be recorded", run_id, message)
        finally:
            context.logger.close(status)
            with self._lock:
                self._contexts.pop(run_id, None)


def _estimate(config: cfg.CommonConfig, prepared: Any) -> RunTime | None:
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


def get_manager() -> RunManager:
    """The process-wide RunManager (the studio and the CLI each have one)."""
    global _manager
    with _manager_lock:
        if _manager is None or _manager.store.path != paths.db_path().resolve():
            _manager = RunManager()
        return _manager
