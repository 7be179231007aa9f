"""No silent failure paths: the places that used to swallow an exception (`except Exception: pass` in runs.py twice,
serve/app.py) log it with its traceback now, and the engine has no `except ...: pass` left (read from the source)."""

from __future__ import annotations

import ast
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

from cookbook_engine import config as cfg, runs

ENGINE = Path(runs.__file__).resolve().parent


class BrokenStore:
    """A store whose writes fail (a full disk, a dead helper)."""

    def mark_orphans_interrupted(self) -> list[str]:
        return []

    def delete_run(self, run_id: str) -> None:
        raise OSError("disk full")

    def claim_run(self, run_id: str) -> None:
        pass

    def get_run(self, run_id: str) -> None:
        return None

    def update_run(self, run_id: str, **changes: object) -> None:
        raise OSError("disk full")


def test_a_run_whose_rows_cannot_be_deleted_logs_why_and_still_removes_its_folder(tmp_path, caplog):
    folder = tmp_path / "run"
    folder.mkdir()
    with caplog.at_level(logging.ERROR, logger="cookbook_engine.runs"):
        runs.RunManager(store=BrokenStore())._forget("sl-1", folder)  # type: ignore[arg-type]
    assert not folder.exists()
    record = next(r for r in caplog.records if "sl-1" in r.getMessage())
    assert record.exc_info and "disk full" in str(record.exc_info[1])


def test_a_failed_run_whose_failure_cannot_be_recorded_logs_both(monkeypatch, caplog):
    async def failing_train(config, ctx, prepared):
        raise RuntimeError("loss is NaN")

    monkeypatch.setattr(runs, "loop_module", lambda kind: SimpleNamespace(train=failing_train))
    closed = []
    context = SimpleNamespace(
        run_id="sl-2",
        cancel_event=threading.Event(),
        note=lambda message: None,
        logger=SimpleNamespace(close=closed.append),
    )
    with caplog.at_level(logging.ERROR, logger="cookbook_engine.runs"):
        runs.RunManager(store=BrokenStore())._execute(cfg.SLConfig(), context, None)  # type: ignore[arg-type]
    assert closed == ["failed"]  # the run's logger (and its trackers) closed with the run's status
    record = next(r for r in caplog.records if "sl-2" in r.getMessage())
    assert "loss is NaN" in record.getMessage() and "disk full" in str(record.exc_info[1])


BROAD = {None, "Exception", "BaseException"}  # a bare `except:` has no type


def swallowing_handlers(source: str) -> list[int]:
    """Lines of broad `except:` / `except Exception:` handlers whose whole body is `pass` (a narrow one, such as
    `except ProcessLookupError: pass` around killing a process that already ended, says what it expects)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ExceptHandler)
        and (ast.unparse(node.type) if node.type else None) in BROAD
        and all(isinstance(stmt, ast.Pass) for stmt in node.body)
    ]


def test_the_swallow_finder_finds_one():
    assert swallowing_handlers("try:\n    x()\nexcept Exception:\n    pass\n") == [3]
    assert swallowing_handlers("try:\n    x()\nexcept OSError:\n    pass\n") == []


def test_no_engine_or_serve_module_swallows_an_exception():
    found = {str(p.relative_to(ENGINE)): swallowing_handlers(p.read_text()) for p in sorted(ENGINE.rglob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
