"""Runs started from the studio train in a child process of their own (issue 27, item 13: a page drawn in the studio
must never hold up a training step, and pages and a training thread of one process share its interpreter lock).

With the default model: a studio-started run trains in another pid than the studio's and is still watched, stopped
and resumed through the RunManager (status cancelled, a checkpoint to resume from); a child killed mid-run leaves the
run failed with how its process ended; a chat snapshot of the live weights comes from the child; and a studio that
goes away takes its runs down cleanly (cancelled after their step, not training forever)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from test_studio_apptest import wait_for  # the studio tests' helper

from cookbook_engine import priority, runs
from cookbook_engine.config import SLConfig
from storage import Store, statuses


def long_run(name: str) -> SLConfig:
    return SLConfig(name=name, max_steps=400, batch_size=2, save_every=0, eval_every=0, test_fraction=0.0)


@pytest.fixture
def studio(home, default_model_ready):
    manager = runs.get_manager(child_processes=True)  # the studio's (app/state.py), which the chat asks too
    yield manager
    manager.stop_children(timeout_s=120)


def test_a_studio_run_trains_in_its_own_process_and_stops_cancelled_with_a_checkpoint(studio):
    run_id = studio.start(long_run("apart"))
    run = wait_for(lambda: (r := studio.store.get_run(run_id))["step"] and r, what="the run's first step")
    assert run["owner_pid"] not in (None, os.getpid())  # the training is not in this process
    # in the studio's session (the kernel weighs CPU per session: pages at nice 10 yield to it), not its process
    # group (a Ctrl-C at the terminal reaches the studio only)
    assert os.getsid(run["owner_pid"]) == os.getsid(0) and os.getpgid(run["owner_pid"]) != os.getpgid(0)
    assert studio.is_alive(run_id) and studio.active_run_ids() == [run_id]
    assert studio.live_training_client(run_id) is None  # its training client lives in the child

    from cookbook_engine import chat

    target = chat.ChatTarget(f"latest:{run_id}", "apart", "latest", run["base_model"], run_id=run_id)
    weights = chat.open_weights(target, studio.store)
    assert weights.source == "live" and "live weights of apart" in weights.description
    assert weights.client.sample  # a sampler on weights that were never saved as a checkpoint
    assert not studio.store.list_checkpoints(run_id)  # the snapshot is not a checkpoint of the run

    studio.cancel(run_id)
    ended = studio.wait(run_id, timeout=300)
    assert ended["status"] == "cancelled" and not studio.is_alive(run_id)
    assert studio.store.last_checkpoint(run_id) is not None  # it saved before stopping: it can be resumed
    snapshot = [f for f in studio.files_of(run_id) if f.name == "live-snapshot"]
    assert snapshot  # deleting the run removes the chat's snapshot too
    studio.delete(run_id)
    assert not snapshot[0].exists()


def test_a_child_killed_mid_run_leaves_the_run_failed_with_how_it_ended(studio):
    run_id = studio.start(long_run("killed"))
    pid = wait_for(lambda: studio.store.get_run(run_id)["owner_pid"], what="the child to claim the run")
    os.kill(pid, signal.SIGKILL)
    ended = studio.wait(run_id, timeout=120)
    assert ended["status"] == "failed"
    assert f"its training process {pid} ended (killed by signal 9)" in ended["error"]
    assert not studio.is_alive(run_id)


@pytest.mark.skipif(not priority.supported(), reason="per-thread priorities are Linux's")
def test_a_run_started_from_a_page_thread_trains_at_the_studios_priority_not_the_pages(studio):
    started = {}

    def page() -> None:  # a page's script thread draws below the process (app/main.py)
        priority.lower_this_thread()
        started["run_id"] = studio.start(long_run("from-a-page"))

    thread = threading.Thread(target=page)
    thread.start()
    thread.join()
    pid = wait_for(lambda: studio.store.get_run(started["run_id"])["owner_pid"], what="the child to claim the run")
    assert os.getpriority(os.PRIO_PROCESS, pid) == priority.process_nice() < priority.process_nice() + 10
    os.kill(pid, signal.SIGKILL)
    studio.wait(started["run_id"], timeout=120)


STUDIO_THAT_DIES = """
    import os, sys, time
    from cookbook_engine import priority, runs
    from cookbook_engine.config import SLConfig
    from storage import Store

    manager = runs.RunManager(Store(sys.argv[1]), child_processes=True)
    run_id = manager.start(SLConfig(name="orphan", max_steps=400, batch_size=2, save_every=0, eval_every=0,
                                    test_fraction=0.0))
    print(run_id, flush=True)
    while not (manager.store.get_run(run_id)["step"] or 0):
        time.sleep(0.5)
    os._exit(0)  # the studio goes away without stopping anything (as a killed one does)
"""


def test_a_studio_that_goes_away_leaves_its_runs_cancelled_not_training(home, default_model_ready):
    db = home / "studio.duckdb"
    script = textwrap.dedent(STUDIO_THAT_DIES)
    studio = subprocess.run(
        [sys.executable, "-c", script, str(db)], capture_output=True, text=True, timeout=600, check=True
    )
    run_id = studio.stdout.split()[0]
    store = Store(db)
    run = wait_for(lambda: (r := store.get_run(run_id))["status"] not in statuses.ACTIVE and r, what="the end")
    assert run["status"] == "cancelled" and store.last_checkpoint(run_id) is not None
    assert "the studio that started this run has closed" in (runs.Path(run["log_dir"]) / "log.txt").read_text()
