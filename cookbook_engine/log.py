"""One logging format for the engine, the studio and the command line: `setup_logging()` and the format it installs.

The CLI's `main`, the studio's entry script and `cookbook serve` call `setup_logging()` once at start (calling it
again replaces its handler, so a Streamlit rerun never doubles lines). Engine modules log through
`logging.getLogger(__name__)`; every record, the third-party ones that reach the root logger included, is written to
stderr as `2026-01-02 03:04:05 WARNING cookbook_engine.speed: message`. COOKBOOK_LOG_LEVEL (a name such as DEBUG or
INFO, or a number) sets the level of the cookbook's own loggers; other libraries stay at WARNING or above.

Not here: a run's own log (`log.txt` in the run folder, written by runs.py and shown in the studio), the CLI's output
for people (printed to stdout, with progress lines on stderr), metrics (training/run_logger.py).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

LEVEL_ENV = "COOKBOOK_LOG_LEVEL"
DEFAULT_LEVEL = logging.WARNING
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
PACKAGES = ("cookbook_engine", "storage", "app")  # the loggers COOKBOOK_LOG_LEVEL sets


class CookbookHandler(logging.StreamHandler[TextIO]):
    """The handler setup_logging() installs on the root logger (its type tells it apart from others' handlers).
    Without a stream of its own it writes to `sys.stderr` as it is when each record comes, like logging's last-resort
    handler: a library thread that logs after stderr was replaced and closed (pytest's capture, a finished Streamlit
    script) writes to the live stderr, never to the closed one."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._own_stream = stream
        super().__init__(stream)

    @property  # StreamHandler keeps a plain attribute; this one follows sys.stderr
    def stream(self) -> TextIO:
        return self._own_stream or sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._own_stream = value if value is not sys.stderr else None


def level_from_env() -> tuple[int, str | None]:
    """The level COOKBOOK_LOG_LEVEL names (DEFAULT_LEVEL when unset), and a complaint when it names none."""
    text = os.environ.get(LEVEL_ENV, "").strip()
    if not text:
        return DEFAULT_LEVEL, None
    if text.isdigit():
        return int(text), None
    level = logging.getLevelNamesMapping().get(text.upper())
    if level is None:
        return DEFAULT_LEVEL, f"{LEVEL_ENV}={text!r} is not a level (DEBUG, INFO, WARNING, ERROR); using WARNING"
    return level, None


def setup_logging(stream: TextIO | None = None) -> logging.Handler:
    """Log to `stream` (stderr by default) in FORMAT at the level COOKBOOK_LOG_LEVEL names; returns the handler."""
    level, complaint = level_from_env()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, CookbookHandler)]:
        root.removeHandler(handler)
    handler = CookbookHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    root.addHandler(handler)
    root.setLevel(max(level, DEFAULT_LEVEL))
    for package in PACKAGES:
        logging.getLogger(package).setLevel(level)
    if complaint:
        logging.getLogger(__name__).warning(complaint)
    return handler
