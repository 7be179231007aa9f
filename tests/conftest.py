"""Shared test setup: every test session gets its own studio home (COOKBOOK_HOME) so tests never touch a real
one, while the converted default model is cached once per checkout (.test-cache/models) and reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL_CACHE = REPO / ".test-cache" / "models"


def pytest_configure(config):
    os.environ.setdefault("COOKBOOK_MODEL_CACHE", str(MODEL_CACHE))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Most tests have a home of their own, each with a storage owner process: stop those soon after the test.
    os.environ.setdefault("COOKBOOK_STORAGE_IDLE_S", "10")


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory):
    """A fresh studio home for the whole session (tests that need their own use `home` below)."""
    home = tmp_path_factory.mktemp("cookbook-home")
    previous = os.environ.get("COOKBOOK_HOME")
    os.environ["COOKBOOK_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("COOKBOOK_HOME", None)
    else:
        os.environ["COOKBOOK_HOME"] = previous


@pytest.fixture
def cancel_at_step():
    """cancel(manager, run_id, step): wait (at most 10 minutes) until the run has logged `step` steps, cancel it and
    wait for it to stop; returns the stopped run's record."""

    def cancel(manager, run_id: str, step: int) -> dict:
        import time

        from storage import Store

        store = Store.default()
        deadline = time.time() + 600
        while (store.get_run(run_id)["step"] or 0) < step and time.time() < deadline:
            time.sleep(0.2)
        manager.cancel(run_id)
        return manager.wait(run_id, timeout=300)

    return cancel


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh, empty studio home for one test."""
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="session")
def default_model_ready():
    """The default model converted into the shared cache (about 20 s the first time on a machine), and the input
    covariances RL's, DPO's and SFT's defaults read their LoRA directions from (lora_a=null_space: the ordinary
    chats' about 2 min, each task's tens of seconds, the first time), so that no test's run waits for them under
    its own time limit."""
    from cookbook_engine import config as cfg, models
    from cookbook_engine.training import lora_a, null_space

    models.prepare_default_model()
    for config in (cfg.RLConfig(), cfg.DPOConfig(), cfg.SLConfig()):
        _, chats = lora_a.TASKS[lora_a.task_of(config)]
        null_space.covariances_for(models.DEFAULT_MODEL, chats(), lora_a.modules(config))
    return models.DEFAULT_MODEL
