"""Records what a run produces: to the studio's DuckDB store and to the run folder in tinker-cookbook's shapes.

The run folder gets `config.json` (indent 2), `metrics.jsonl` (one `{"step": step, **metrics}` per line) and
`checkpoints.jsonl` (`{"name", "batch", "state_path", "sampler_path", **loop_state}`), so cookbook users' own
tools read our runs; a metric value is cleaned once (storage/metrics.py) and the file and the store get the same
value. Each line is flushed as it is written: a crash loses at most the step in flight.

Experiment trackers (`log_to=wandb,mlflow,tensorboard`, cookbook_engine/trackers.py) are sinks of the same calls:
`open_trackers` starts them with the run's settings, each metric step, checkpoint and the config reach them as they
reach the file, and `close` ends them. A tracker that fails (to start, or at any call) never stops training: the
error goes to the process log with its traceback (`logger.exception`), a line to the run's log, and that tracker is
left out for the rest of the attempt; the store and the run folder still get everything. This module holds no SQL
(that is storage/) and no training logic; it does not decide when to log.
"""

from __future__ import annotations

import json
import logging
import operator
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cookbook_engine import trackers
from storage import RunStore, clean_metrics, json_default

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
CONFIG_FILE = "config.json"


def _as_step(step: Any, where: str) -> int:
    """A step as a plain int (numpy integers accepted); bools and floats are refused."""
    if isinstance(step, bool):
        raise TypeError(f"{where} must be an integer, got {step!r}")
    try:
        return operator.index(step)
    except TypeError:
        raise TypeError(f"{where} must be an integer, got {type(step).__name__} {step!r}") from None


def _append_line(path: Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, default=json_default)
    with path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()


class RunLogger:
    """Logs one run. Every call writes through at once; there is nothing to close."""

    def __init__(self, store: RunStore, run_id: str, log_dir: str | Path) -> None:
        self.store = store
        self.run_id = run_id
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.latest: dict[str, float] = {}  # the last step's finite metrics (the run log's per-step lines quote them)
        self.sinks: list[trackers.Sink] = []  # the experiment trackers open for this attempt of the run
        self._note: Callable[[str], None] = lambda message: None

    @property
    def metrics_path(self) -> Path:
        return self.log_dir / METRICS_FILE

    @property
    def checkpoints_path(self) -> Path:
        return self.log_dir / CHECKPOINTS_FILE

    @property
    def config_path(self) -> Path:
        return self.log_dir / CONFIG_FILE

    def write_config(self, config: dict[str, Any]) -> None:
        """Write config.json (indent 2), replacing any earlier one."""
        try:
            text = json.dumps(config, indent=2, default=json_default)
        except TypeError as exc:
            raise TypeError(f"config of run {self.run_id!r} cannot be written to {self.config_path}: {exc}") from exc
        self.config_path.write_text(text + "\n", encoding="utf-8")

    def open_trackers(
        self, settings: trackers.TrackerSettings, config: dict[str, Any], note: Callable[[str], None]
    ) -> None:
        """Start the run's experiment trackers and give them its settings; `note` writes a line to the run's log.
        A tracker that cannot start is reported (process log and `note`) and left out; training goes on."""
        self._note = note
        for name in settings.names:
            try:
                sink = trackers.open_sink(name, settings)
            except Exception as exc:
                logger.exception("run %s: experiment tracker %s could not start", self.run_id, name)
                note(f"tracker {name}: could not start ({type(exc).__name__}: {exc}); training goes on without it")
                continue
            self.sinks.append(sink)
        self._to_trackers("log_config", config)
        if self.sinks:
            note(f"logging to {', '.join(sink.name for sink in self.sinks)}")

    def _to_trackers(self, call: str, *args: Any) -> None:
        """Make `call` on every open tracker; one that fails is logged and dropped, the others go on."""
        for sink in list(self.sinks):
            try:
                getattr(sink, call)(*args)
            except Exception as exc:
                logger.exception("run %s: experiment tracker %s failed in %s", self.run_id, sink.name, call)
                self.sinks.remove(sink)
                self._note(
                    f"tracker {sink.name}: {call} failed ({type(exc).__name__}: {exc}); training goes on without it"
                )

    def close(self, status: str) -> None:
        """End the trackers' runs (`status`: how the run ended, e.g. completed or failed)."""
        self._to_trackers("close", status)
        self.sinks = []

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """One step's metrics to metrics.jsonl, to the store and to the trackers, cleaned once (storage.clean_metrics:
        numpy/torch scalars become floats, NaN and inf become null in the file and NULL in the store; trackers get
        the finite ones)."""
        step = _as_step(step, f"metrics step of run {self.run_id!r}")
        cleaned = clean_metrics(metrics, f"metrics of run {self.run_id!r} at step {step}")
        _append_line(self.metrics_path, {"step": step, **cleaned})
        self.store.log_metrics(self.run_id, step, cleaned)  # a CleanMetrics: the store does not clean it again
        self.latest = trackers.finite(cleaned)
        if self.sinks and self.latest:
            self._to_trackers("log_metrics", step, self.latest)

    def log_checkpoint(
        self,
        *,
        step: int,
        name: str,
        kind: str,
        state_path: str | None = None,
        sampler_path: str | None = None,
        loop_state: dict[str, Any] | None = None,
    ) -> None:
        """A saved checkpoint to the store and to checkpoints.jsonl (paths that are None are left out)."""
        step = _as_step(step, f"step of checkpoint {name!r} of run {self.run_id!r}")
        self.store.add_checkpoint(
            self.run_id,
            step=step,
            name=name,
            kind=kind,
            state_path=state_path,
            sampler_path=sampler_path,
            loop_state=loop_state,
        )
        record: dict[str, Any] = {"name": name, "batch": step}
        if state_path is not None:
            record["state_path"] = state_path
        if sampler_path is not None:
            record["sampler_path"] = sampler_path
        record.update(loop_state or {})
        _append_line(self.checkpoints_path, record)
        self._to_trackers("log_checkpoint", step, record)

    def log_transcripts(self, rows: list[dict[str, Any]]) -> None:
        """Sampled completions of a step (see Store.add_transcripts for the keys); store only."""
        self.store.add_transcripts(self.run_id, rows)

    def truncate_after(self, step: int) -> None:
        """Forget what was logged after `step` before resuming from it: metrics and transcripts in the store,
        and metrics.jsonl lines with a larger step (a torn last line from a crash is dropped too)."""
        step = _as_step(step, f"truncate_after step of run {self.run_id!r}")
        self.store.delete_metrics_after(self.run_id, step)
        self.store.delete_transcripts_after(self.run_id, step)
        if not self.metrics_path.exists():
            return
        kept_lines = []
        for line in self.metrics_path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
                kept_lines.append(line + "\n")
        temporary_path = self.metrics_path.with_name(METRICS_FILE + ".tmp")
        temporary_path.write_text("".join(kept_lines), encoding="utf-8")
        os.replace(temporary_path, self.metrics_path)
