"""Each list the engine, the CLI and the studio share has one home, and every place that uses it agrees with it:
run statuses and their groups (storage/statuses.py), the bad-input error base (storage/input_error.py), each run
kind's key metric (cookbook_engine/training/metric_names.py) and the studio's session-state keys (app/state_keys.py).
The checks are generated from those homes or from the source itself, so a new status, error, kind or key that skips
its home fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import pytest

import cookbook_engine
import storage
from app import state_keys
from cookbook_engine import cli
from cookbook_engine.training.metric_names import KEY_METRIC, KEY_METRIC_SHORT, key_metric
from storage import Store, statuses
from storage.input_error import BAD_INPUT, InputError
from storage.schema import RUN_KINDS
from storage.statuses import RunStatus, SessionEnd, run_status_after

REPO = Path(__file__).resolve().parent.parent
CODE_FOLDERS = ("cookbook_engine", "storage", "app", "pages")
STATUS_VALUES = {status.value for status in RunStatus}


def source_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


# ---------------------------------------------------------------------------------------------- run statuses


def test_the_status_groups_partition_the_statuses_the_way_their_names_say():
    assert set(statuses.ACTIVE) | set(statuses.TERMINAL) == set(RunStatus)
    assert not set(statuses.ACTIVE) & set(statuses.TERMINAL)
    assert set(statuses.STOPPABLE) < set(statuses.ACTIVE)
    assert set(statuses.RESUMABLE) | {RunStatus.COMPLETED} == set(statuses.TERMINAL)
    assert set(statuses.WENT_WRONG) < set(statuses.RESUMABLE) and set(statuses.ENDED_AS_ASKED) < set(statuses.TERMINAL)


def test_a_status_read_back_as_a_plain_string_matches_its_member_everywhere():
    assert "running" == RunStatus.RUNNING and "running" in statuses.ACTIVE and f"{RunStatus.RUNNING}" == "running"
    assert "running" in {RunStatus.RUNNING} and {RunStatus.RUNNING: 1}["running"] == 1


def test_the_store_accepts_every_status_and_only_those(tmp_path):
    store = Store(tmp_path / "studio.duckdb")
    store.create_run("r1", name="r", kind="sl", backend="local", base_model="m", config={}, log_dir=tmp_path)
    assert store.get_run("r1")["status"] == RunStatus.QUEUED
    for status in RunStatus:
        store.update_run("r1", status=status)
        run = store.get_run("r1")
        assert run["status"] == status and (run["finished_at"] is not None) == (status in statuses.TERMINAL)
    with pytest.raises(ValueError, match="must be one of queued, running"):
        store.update_run("r1", status="finished")


def test_a_closed_session_gives_its_run_a_status():
    assert [run_status_after(end) for end in SessionEnd] == [
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.INTERRUPTED,
    ]
    assert run_status_after("some future reason") == RunStatus.INTERRUPTED


def test_every_status_has_a_badge_and_every_ended_run_a_toast():
    from app import notices, widgets

    assert set(widgets.STATUS_STYLE) == set(RunStatus)
    assert set(notices.FINISHED_TOAST) == set(statuses.TERMINAL)


def _status_literals(source: str, where: str) -> list[str]:
    """Where the source spells a run status as a string: `x["status"] == "done"`, `... in ("a", "b")`,
    `status="done"`, or a tuple/dict of statuses."""
    found = set()
    for node in ast.walk(ast.parse(source, where)):
        strings = []
        if isinstance(node, ast.keyword) and node.arg == "status" and isinstance(node.value, ast.Constant):
            strings = [node.value.value]
        elif isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                strings += [item.value for item in items if isinstance(item, ast.Constant)]
        elif isinstance(node, (ast.Tuple, ast.Dict)):
            items = node.elts if isinstance(node, ast.Tuple) else node.keys
            values = [item.value for item in items if isinstance(item, ast.Constant)]
            strings = values if len(values) >= 2 and set(values) <= STATUS_VALUES else []
        found |= {
            f"{where}:{node.lineno} {text!r}" for text in strings if isinstance(text, str) and text in STATUS_VALUES
        }
    return sorted(found)


def test_no_code_spells_a_run_status_outside_its_home():
    home = REPO / "storage" / "statuses.py"
    found = [
        hit
        for path in source_files(*CODE_FOLDERS)
        if path != home
        for hit in _status_literals(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not found, "use storage.statuses (RunStatus and its groups) instead:\n" + "\n".join(found)


def test_the_status_check_finds_a_spelled_out_status():
    sample = 'if run["status"] in ("queued", "running"):\n    store.update_run(run_id, status="failed")\n'
    assert len(_status_literals(sample, "sample.py")) == 3


# ---------------------------------------------------------------------------------------------- bad input

# Errors whose names end in Error but that are not a person's bad input (a bug, a busy disk, sandboxed code).
NOT_BAD_INPUT = {
    "SolutionError": "the RL policy's code raised: a reward of 0, not a message for the person",
    "ToolError": "the RL policy called a tool wrongly: an error text fed back to the model, not for the person",
    "ProtocolError": "a sandboxed process sent a malformed message",
    "StorageOwnerError": "the database's owner process could not start or died: not the input's fault",
    "SetupError": "the sandbox's launcher could not set up its isolation (a mount, a namespace): the machine's fault",
    "OpenAIError": "an answer of cookbook serve's /v1 routes in OpenAI's error shape (4xx or 5xx), by their handler",
}


def _error_classes() -> dict[str, type]:
    """Every exception class named *Error defined in the engine's and storage's modules (imported to find them)."""
    classes = {}
    for package in (cookbook_engine, storage):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                module = importlib.import_module(module_info.name)
            except ImportError:  # an optional backend missing from this build
                continue
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and name.endswith("Error")
                    and not name.startswith("_")
                    and value.__module__ == module.__name__
                ):
                    classes[name] = value
    return classes


def test_every_bad_input_error_in_the_engine_is_an_input_error():
    classes = _error_classes()
    assert {"ConfigError", "DatasetError", "HomeError", "ModelError", "TargetError", "SweepError"} <= set(classes)
    unsorted = [name for name, cls in classes.items() if not issubclass(cls, InputError) and name not in NOT_BAD_INPUT]
    assert not unsorted, f"subclass InputError (or list it in NOT_BAD_INPUT with why): {unsorted}"
    assert not [name for name in NOT_BAD_INPUT if name in classes and issubclass(classes[name], InputError)]


def test_input_errors_keep_their_old_bases_for_older_except_clauses():
    from cookbook_engine.config import ConfigError
    from cookbook_engine.paths import HomeError

    assert issubclass(ConfigError, ValueError) and issubclass(HomeError, OSError)
    assert InputError in BAD_INPUT and FileNotFoundError in BAD_INPUT


class MadeUpError(InputError, ValueError):
    """An input error no front door knows by name."""


def refuse(config):
    raise MadeUpError("dataset=made-up.jsonl: a made-up problem")


def test_the_cli_shows_any_input_error_as_one_line_and_exits_2(home, monkeypatch, capsys):
    from cookbook_engine import runs

    monkeypatch.setattr(runs, "preflight", refuse)
    assert cli.main(["sl", "max_steps=1"]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip() == "cookbook: error: dataset=made-up.jsonl: a made-up problem"


def test_the_studio_form_shows_any_input_error_as_a_message(home, monkeypatch):
    from app import forms, state
    from cookbook_engine import config as cfg, models, runs

    monkeypatch.setattr(runs, "preflight", refuse)
    monkeypatch.setattr(models, "default_model_ready", lambda: True)
    monkeypatch.setattr(state, "ensure_default_model", lambda: None)
    result = forms.check(cfg.SLConfig())
    assert not result.ok and result.problems == ["dataset=made-up.jsonl: a made-up problem"]


# ---------------------------------------------------------------------------------------------- key metric


def test_every_run_kind_has_a_key_metric():
    assert set(KEY_METRIC) == set(KEY_METRIC_SHORT) == set(RUN_KINDS) and key_metric("no-such-kind") == ""


def test_the_cli_and_the_studio_quote_the_same_key_metric(tmp_path, monkeypatch, capsys):
    from app import widgets
    from cookbook_engine.runs import step_line

    store = Store(tmp_path / "studio.duckdb")
    runs = []
    for kind, metric in KEY_METRIC.items():
        store.create_run(
            f"{kind}-1", name=kind, kind=kind, backend="local", base_model="m", config={}, log_dir=tmp_path
        )
        store.log_metrics(f"{kind}-1", 1, {metric: 0.5})
        runs.append(store.get_run(f"{kind}-1"))
        assert f"{metric}=0.5" in step_line(1, 2, kind, {metric: 0.5})
    monkeypatch.setattr(Store, "default", classmethod(lambda cls: store))
    assert cli.list_runs(as_json=True) == 0
    listed = {row["kind"]: row["key_metric"] for row in json.loads(capsys.readouterr().out)}
    shown = {  # the runs table says it in a word or two; its column's help names the metric
        run["kind"]: text.rsplit(" ", 1)[0]
        for run, text in zip(runs, widgets.runs_frame(runs, {r["run_id"]: 0.5 for r in runs})["Key metric"])
    }
    assert listed == KEY_METRIC and shown == KEY_METRIC_SHORT
    help_text = widgets.RUNS_COLUMN_CONFIG["Key metric"]["help"]
    assert all(f"{KEY_METRIC_SHORT[kind]} = {metric}" in help_text for kind, metric in KEY_METRIC.items())


# ---------------------------------------------------------------------------------------------- session state

STATE_CALLS = ("get", "setdefault", "pop")


def _literal_state_keys(source: str, where: str) -> list[str]:
    """`session_state["x"]`, `session_state.get("x")` (also setdefault, pop) with a literal or f-string key."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        key = None
        if isinstance(node, ast.Subscript) and getattr(node.value, "attr", None) == "session_state":
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STATE_CALLS
            and getattr(node.func.value, "attr", None) == "session_state"
            and node.args
        ):
            key = node.args[0]
        if isinstance(key, (ast.Constant, ast.JoinedStr)):
            found.append(f"{where}:{node.lineno} {ast.unparse(key)}")
    return found


def test_pages_and_the_app_name_session_state_keys_only_through_state_keys():
    found = [
        hit
        for path in source_files("app", "pages")
        for hit in _literal_state_keys(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not found, "add the key to app/state_keys.py and use it:\n" + "\n".join(found)


def test_no_session_state_key_is_spelled_out_as_a_widget_key_either():
    values = {value for name, value in vars(state_keys).items() if name.isupper()}
    home = REPO / "app" / "state_keys.py"
    found = [
        f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}"
        for path in source_files("app", "pages")
        if path != home
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values
    ]
    assert not found, "use the app/state_keys.py name:\n" + "\n".join(found)


def test_the_key_check_finds_a_spelled_out_key():
    sample = 'st.session_state["x"] = st.session_state.get(f"y-{z}")\nst.session_state.pop(state_keys.NOTICE)\n'
    assert len(_literal_state_keys(sample, "sample.py")) == 2
