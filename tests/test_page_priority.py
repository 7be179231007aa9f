"""Pages draw below the runs training in the studio's process, and nothing started from a page inherits that (issue
27, item 13: ten pages loading made one SL step take 35.6 s instead of 4 s). Checked by the nice values Linux gives
each thread, not by timing: benchmarks/pages_beside_training.py measures the step times."""

from __future__ import annotations

import os
import threading
import types

import pytest
from streamlit.testing.v1 import AppTest
from test_studio_apptest import MAIN

from cookbook_engine import priority, runs
from cookbook_engine.backends import local
from cookbook_engine.config import SLConfig
from storage import Store

pytestmark = pytest.mark.skipif(
    not priority.supported() or priority.process_nice() + 1 > priority.MAX_NICE,
    reason="needs per-thread priorities (Linux) and room below this process's priority",
)


def on_a_page_thread(fn):
    """fn's result, called on a fresh thread that lowered itself as a page's script thread does (the test's own
    threads keep their priority: a thread can never raise it again)."""
    result: list = []

    def page() -> None:
        priority.lower_this_thread()
        result.append(fn())

    thread = threading.Thread(target=page)
    thread.start()
    thread.join(timeout=60)
    return result[0]


def page_nice() -> int:
    return min(priority.MAX_NICE, priority.process_nice() + priority.PAGE_NICE)


def test_a_page_draws_below_the_studio_process(home, monkeypatch):
    lowered: dict[int, int] = {}
    real_setpriority = os.setpriority

    def recording(which: int, who: int, value: int) -> None:
        lowered[who] = value
        real_setpriority(which, who, value)

    monkeypatch.setattr(os, "setpriority", recording)
    AppTest.from_file(MAIN, default_timeout=60).run()
    page_threads = {who: value for who, value in lowered.items() if who != os.getpid()}
    assert list(page_threads.values()) == [page_nice()], lowered  # the script thread, not the process


def live_refresh_script() -> None:
    import streamlit as st

    from app import widgets
    from cookbook_engine import priority

    widgets.fragment(run_every=2)(lambda: st.write(f"drawn at nice {priority.thread_nice()}"))()


def test_a_live_fragment_draws_below_the_studio_process():
    """A fragment's own rerun (a live refresh) draws on a fresh script thread that never ran app/main.py."""
    at = AppTest.from_function(live_refresh_script, default_timeout=60).run()
    assert [m.value for m in at.markdown] == [f"drawn at nice {page_nice()}"]


def test_a_run_started_from_a_page_trains_at_the_studio_priority(home, monkeypatch):
    trained_at: list[int] = []

    async def train(config, ctx, prepared):
        trained_at.append(priority.thread_nice())

    monkeypatch.setattr(runs, "loop_module", lambda kind: types.SimpleNamespace(train=train))
    manager = runs.RunManager(Store(home / "studio.duckdb"))

    def start_from_the_page() -> tuple[int, int]:
        plain = threading.Thread(target=lambda: inherited.append(priority.thread_nice()))
        plain.start()  # what a thread started from a page gets without priority.start
        plain.join()
        run_id = manager.start(SLConfig(name="from-a-page"), prepared=object())
        manager.wait(run_id, timeout=60)
        return priority.thread_nice(), inherited[0]

    inherited: list[int] = []
    page, plain = on_a_page_thread(start_from_the_page)
    assert page == plain == page_nice()  # the page drew lowered, and a thread it starts inherits that
    assert trained_at == [priority.process_nice()]  # the run does not


def test_a_model_worker_made_for_a_page_computes_at_the_studio_priority(monkeypatch):
    """Chat makes the base model's worker from a page; a run on that model later trains on the same worker."""
    monkeypatch.setattr(local.models, "load_tokenizer", lambda model: None)
    monkeypatch.setattr(local.ModelWorker, "_load", lambda self: None)
    worker = on_a_page_thread(lambda: local.ModelWorker("stand-in"))
    try:
        assert worker.call(priority.thread_nice) == priority.process_nice()
    finally:
        worker.stop(timeout_s=10)
