"""What a loop gets besides its config (`RunContext`): the run's id, its store and logger, whether it was asked to
stop, where it resumes from, and its log lines (`note`, and `progress` with a step line of the key metrics every
total/20 steps). The RunManager (runs.py) makes one per run; the loops only use it. Not here: starting, cancelling or
resuming runs (runs.py), what a loop does (sl/, dpo/, rl/).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cookbook_engine import secrets
from cookbook_engine.training.metric_names import key_metric
from cookbook_engine.training.run_logger import RunLogger
from storage import RunStore
from storage.statuses import RunStatus

STEP_LINE_METRICS = ("test/nll", "accuracy", "env/all/correct", "learning_rate", "optim/lr")  # after the key one
STEP_LINES_PER_RUN = 20  # the run log gets a line with the key metrics every total/20 steps (and at the last)


@dataclass
class RunContext:
    """What a loop gets besides its config: where to log, whether to stop, where to resume from."""

    run_id: str
    store: RunStore
    logger: RunLogger
    log_dir: Path
    cancel_event: threading.Event = field(default_factory=threading.Event)
    resume: dict | None = None  # the checkpoint row to resume from (with its loop_state)
    echo: Callable[[str], None] | None = None  # the CLI prints notes here
    training_client: Any = None  # set once the loop has its training client (chat snapshots the live weights)
    kind: str = ""  # "sl" | "dpo" | "rl": which key metric the log's step lines quote
    _last_poll: float = 0.0

    def cancelled(self) -> bool:
        """True once someone asked the run to stop: at once when asked in this process (the event), within about
        a second when asked by another process through the database (polled at most once a second)."""
        if self.cancel_event.is_set():
            return True
        now = time.monotonic()
        if now - self._last_poll > 1.0:
            self._last_poll = now
            if self.store.run_status(self.run_id) == RunStatus.CANCELLING:
                self.cancel_event.set()
        return self.cancel_event.is_set()

    def progress(self, step: int, total: int) -> None:
        """`step` steps of `total` are done; every total/20 steps (and at the last) the log gets a line with the
        key metrics of the step just finished."""
        self.store.update_run(self.run_id, step=step, total_steps=total)
        every = max(1, total // STEP_LINES_PER_RUN)
        if step > 0 and (step % every == 0 or step == total) and self.logger.latest:
            self.note(step_line(step, total, self.kind, self.logger.latest))

    def note(self, message: str) -> None:
        """A line for the run's log (shown in the studio and printed by the CLI)."""
        message = secrets.redact(message)
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        with open(self.log_dir / "log.txt", "a", encoding="utf-8") as handle:
            handle.write(f"{stamp} {message}\n")
        if self.echo:
            self.echo(message)


def step_line(step: int, total: int, kind: str, metrics: dict[str, float]) -> str:
    """'step 40/200 · train_mean_nll=1.2345 · learning_rate=0.0008 · 2.1 s/step' for the run log."""
    names = [key_metric(kind), *STEP_LINE_METRICS]
    parts = [f"step {step}/{total}"] + [f"{name}={metrics[name]:.4g}" for name in names if name in metrics]
    if "time/step" in metrics:
        parts.append(f"{metrics['time/step']:.1f} s/step")
    return " · ".join(parts)
