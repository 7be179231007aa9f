"""One log format: the CLI, the studio's entry script and `cookbook serve` all install cookbook_engine.log's handler,
so a log line reads the same wherever it was written, and COOKBOOK_LOG_LEVEL sets how much the cookbook says."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cookbook_engine import cli, log

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) [\w.]+: .*$")


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    """Each test starts without the cookbook's handler and leaves logging as it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in log.PACKAGES}
    for handler in [h for h in root.handlers if isinstance(h, log.CookbookHandler)]:
        root.removeHandler(handler)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, package_level in levels.items():
        logging.getLogger(name).setLevel(package_level)


def installed_handler() -> log.CookbookHandler:
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, log.CookbookHandler)]
    assert len(handlers) == 1, handlers
    return handlers[0]


def formatted(handler: logging.Handler) -> str:
    """One fixed record as this handler writes it."""
    record = logging.LogRecord(
        "cookbook_engine.speed", logging.WARNING, __file__, 1, "calibrating %s failed", ("m",), None
    )
    record.created = 1_700_000_000.0
    return handler.format(record)


def test_the_cli_and_the_studio_entry_log_in_one_format(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["runs", "--json"]) == 0
    from_cli = formatted(installed_handler())
    logging.getLogger("cookbook_engine.speed").warning("from the cli")
    assert LINE.match(capsys.readouterr().err.strip().splitlines()[-1])

    logging.getLogger().removeHandler(installed_handler())
    from streamlit.testing.v1 import AppTest

    from app import state

    monkeypatch.setattr(state, "start_default_model_preparation", lambda retry=False: None)  # no model work here
    AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60).run()
    from_studio = formatted(installed_handler())
    assert from_studio == from_cli
    assert LINE.match(from_cli) and from_cli.endswith("WARNING cookbook_engine.speed: calibrating m failed")


def test_cookbook_serve_logs_in_the_same_format_uvicorn_included(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from cookbook_engine import serve

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: calls.append(options))
    serve.run_server(port=8999, record=False)
    assert calls and calls[0]["log_config"] is None  # uvicorn's loggers reach the root handler, not their own
    line = formatted(installed_handler())
    assert LINE.match(line) and line.endswith("WARNING cookbook_engine.speed: calibrating m failed")


@pytest.mark.parametrize(
    ("value", "shown", "hidden"),
    [
        ("DEBUG", ["debug", "info", "warning"], []),
        ("info", ["info", "warning"], ["debug"]),
        ("", ["warning"], ["debug", "info"]),
        ("40", [], ["debug", "info", "warning"]),
    ],
)
def test_cookbook_log_level_sets_what_the_cookbook_says(
    monkeypatch: pytest.MonkeyPatch, value: str, shown: list[str], hidden: list[str]
) -> None:
    monkeypatch.setenv(log.LEVEL_ENV, value)
    stream = io.StringIO()
    log.setup_logging(stream)
    engine = logging.getLogger("cookbook_engine.data.loading")
    engine.debug("debug")
    engine.info("info")
    engine.warning("warning")
    words = [line.rsplit(": ", 1)[1] for line in stream.getvalue().splitlines()]
    assert words == shown and not set(hidden) & set(words)


def test_other_libraries_stay_quiet_and_a_bad_level_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(log.LEVEL_ENV, "DEBUG")
    stream = io.StringIO()
    log.setup_logging(stream)
    logging.getLogger("urllib3.connectionpool").info("a third-party chatter")
    logging.getLogger("urllib3.connectionpool").warning("a third-party warning")
    assert stream.getvalue().splitlines()[-1].endswith("urllib3.connectionpool: a third-party warning")
    assert "chatter" not in stream.getvalue()

    monkeypatch.setenv(log.LEVEL_ENV, "loud")
    stream = io.StringIO()
    log.setup_logging(stream)
    assert "COOKBOOK_LOG_LEVEL='loud' is not a level" in stream.getvalue()
    assert logging.getLogger("cookbook_engine").level == logging.WARNING


def test_setting_up_again_replaces_the_handler_instead_of_doubling_lines() -> None:
    first, second = io.StringIO(), io.StringIO()
    log.setup_logging(first)
    log.setup_logging(second)  # a Streamlit rerun of the entry script
    logging.getLogger("cookbook_engine.export").warning("once")
    assert first.getvalue() == "" and second.getvalue().count("once") == 1
    installed_handler()


def test_a_library_thread_logging_after_stderr_was_replaced_and_closed_writes_to_the_live_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tinker SDK's heartbeat thread logged after pytest had closed its captured stderr, and the handler, holding
    that stream, printed '--- Logging error --- I/O operation on closed file' at the end of the suite."""
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    log.setup_logging()
    logging.getLogger("tinker.lib").warning("while the test ran")
    first.close()
    live = io.StringIO()
    monkeypatch.setattr("sys.stderr", live)
    logging.getLogger("tinker.lib").warning("after the capture ended")
    assert LINE.match(live.getvalue().strip()) and "after the capture ended" in live.getvalue()
