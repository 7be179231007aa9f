"""Clean exit (issue 21): no process of the project aborts at exit ("terminate called without an active exception")
and background threads stop in order (cookbook_engine/shutdown.py).

Fast: the exit hook runs the stoppers once, in order, in a child interpreter. Slow (they load the model): an AppTest
session of the studio's Home that prepares the default model on its background thread into a fresh model cache,
then exits, both once the preparation is done and while it is still converting; and a CLI command that loads the
model on its worker thread. Each runs in a child process whose exit code must be 0 with no abort text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ABORT = "terminate called"


def run_child(code: str, tmp_path: Path, timeout_s: float = 600, **env_extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COOKBOOK_HOME": str(tmp_path / "home"), **env_extra}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def assert_clean(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert ABORT not in output, output[-3000:]
    assert result.returncode == 0, output[-3000:]


def test_the_exit_hook_runs_each_stopper_once_in_order(tmp_path):
    result = run_child(
        """
        from cookbook_engine import shutdown
        shutdown.register("clients", shutdown.CLIENTS, lambda t: print("clients", flush=True))
        shutdown.register("workers", shutdown.WORKERS, lambda t: print("workers", flush=True))
        shutdown.register("broken", shutdown.WORKERS, lambda t: 1 / 0)
        shutdown.register("preparation", shutdown.PREPARATION, lambda t: print("preparation", flush=True))
        """,
        tmp_path,
    )
    assert_clean(result)
    assert result.stdout.split() == ["preparation", "workers", "clients"]
    assert "stopping broken failed" in result.stderr


APPTEST_HOME = """
    import time
    from streamlit.testing.v1 import AppTest
    from app import state
    at = AppTest.from_file("app/main.py", default_timeout=120).run()
    assert not at.exception, at.exception
    thread = state._prep_thread
    assert thread is not None, "the Home page did not start preparing the default model"
    if {wait}:
        thread.join(600)
        assert not thread.is_alive()
    else:
        time.sleep(3)
    print("preparing" if thread.is_alive() else "prepared", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("wait", [True, False], ids=["after-preparation", "during-preparation"])
def test_an_apptest_session_that_prepared_the_model_exits_cleanly(tmp_path, wait):
    cache = tmp_path / "model-cache"  # empty: the studio converts the default model on its background thread
    result = run_child(APPTEST_HOME.format(wait=wait), tmp_path, COOKBOOK_MODEL_CACHE=str(cache))
    assert_clean(result)
    assert ("prepared" if wait else "preparing") in result.stdout
    if wait:
        assert list(cache.rglob("model.safetensors")), "the preparation did not finish"


@pytest.mark.slow
def test_a_cli_command_that_loaded_the_model_on_its_worker_exits_cleanly(tmp_path, default_model_ready):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cookbook_engine.cli",
            "eval",
            "models=base",
            "evals=builtin:arithmetic",
            "max_examples=2",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COOKBOOK_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_clean(result)
