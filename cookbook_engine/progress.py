"""The CLI's progress display while it follows a run or an evaluation: a tqdm bar on a terminal, and sparse plain
lines when stderr is not a terminal (a log file, CI, a pipe), so a 40-minute run leaves tens of lines, not thousands.

Both take the same calls from cli._watch and evals/commands.follow (counting steps or examples):
`update(step, total, postfix)`, `write(line)`, `close()`. Not here:
reading the run's state (the CLI does that) or the studio's timing (app/timing.py).
"""

from __future__ import annotations

import sys
import time

from cookbook_engine import speed

LINE_EVERY_S = 30.0  # plain lines: at most one per this many seconds...
LINE_EVERY_FRACTION = 0.1  # ...or when the run has gone another tenth of the way


class TerminalBar:
    def __init__(self, stream=None, unit: str = "step"):
        from tqdm import tqdm

        self.bar = tqdm(total=None, unit=unit, dynamic_ncols=True, file=stream or sys.stderr)

    def update(self, step: int, total: int | None, postfix: str = "") -> None:
        if total and self.bar.total != total:
            self.bar.total = total
        self.bar.n = step
        if postfix:
            self.bar.set_postfix_str(postfix)
        self.bar.refresh()

    def write(self, line: str) -> None:
        self.bar.write(line, file=self.bar.fp)

    def close(self) -> None:
        self.bar.close()


class SparseLines:
    """One line per LINE_EVERY_S seconds or tenth of the run, whichever comes first, and one at the end:
    'step 40/200 (20%) · train_mean_nll=1.2345 · 3 min 10 s elapsed · about 12 min 40 s left' (an evaluation's:
    'examples 200/600 (33%) · ...')."""

    def __init__(self, stream=None, clock=time.monotonic, unit: str = "step"):
        self.stream, self.clock, self.unit = stream or sys.stderr, clock, unit
        self.started = clock()
        self.last_line_at, self.last_fraction = float("-inf"), -1.0
        self.printed_step: int | None = None
        self.first_seen: tuple[int, float] | None = None  # (step, when): the rate is measured from here
        self.pending: tuple[int, int | None, str] | None = None

    def update(self, step: int, total: int | None, postfix: str = "") -> None:
        if self.first_seen is None:
            self.first_seen = (step, self.clock())
        self.pending = (step, total, postfix)
        fraction = step / total if total else 0.0
        if self.clock() - self.last_line_at >= LINE_EVERY_S or fraction - self.last_fraction >= LINE_EVERY_FRACTION:
            self._line()

    def write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.pending and self.pending[0] != self.printed_step:
            self._line()

    def seconds_left(self, step: int, total: int | None) -> float | None:
        """From the rate since the first step this display saw (the run's own speed, startup excluded)."""
        first_step, first_at = self.first_seen or (step, self.clock())
        if not total or step <= first_step or step >= total:
            return None
        return (total - step) * (self.clock() - first_at) / (step - first_step)

    def _line(self) -> None:
        if self.pending is None:
            return
        step, total, postfix = self.pending
        parts = [f"{self.unit} {step}/{total} ({step / total:.0%})" if total else f"{self.unit} {step}"]
        if postfix:
            parts.append(postfix)
        parts.append(f"{speed.clock(self.clock() - self.started)} elapsed")
        left = self.seconds_left(step, total)
        if left is not None:
            parts.append(f"about {speed.clock(left)} left")
        self.write(" · ".join(parts))
        self.last_line_at, self.last_fraction, self.printed_step = self.clock(), step / total if total else 0.0, step


def progress_display(stream=None, unit: str = "step"):
    """A tqdm bar on a terminal, sparse plain lines otherwise; `unit` names what is counted ("step", "examples")."""
    stream = stream or sys.stderr
    on_terminal = getattr(stream, "isatty", lambda: False)()
    return TerminalBar(stream, unit) if on_terminal else SparseLines(stream, unit=unit)
