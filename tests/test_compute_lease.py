"""The machine-wide compute lease (cookbook_engine/compute_lease.py): processes never compute at the same time,
they take turns instead of one starving the others, a waiting process says whom it waits for, and a process that
dies holding the lease frees it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cookbook_engine import compute_lease

REPO = Path(__file__).resolve().parent.parent

WORKER = """
import json, sys, time
sys.path.insert(0, {repo!r})
from cookbook_engine import compute_lease
compute_lease.set_process_label({label!r})
lease = compute_lease.ComputeLease({folder!r})
turns = []
for _ in range({turns}):
    with lease.hold():
        started = time.time()
        time.sleep({work_s})
        turns.append([started, time.time()])
print(json.dumps(turns))
"""


def start_worker(folder: Path, label: str, turns: int = 6, work_s: float = 0.05) -> subprocess.Popen:
    source = WORKER.format(repo=str(REPO), label=label, folder=str(folder), turns=turns, work_s=work_s)
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)


def test_processes_never_compute_at_once_and_take_turns(tmp_path):
    workers = [start_worker(tmp_path, f"worker {index}") for index in range(3)]
    turns = {index: json.loads(worker.communicate(timeout=120)[0]) for index, worker in enumerate(workers)}
    intervals = sorted((start, end, index) for index, spans in turns.items() for start, end in spans)
    for (_, end, _), (next_start, _, _) in zip(intervals, intervals[1:]):
        assert next_start >= end - 1e-3, "two processes held the lease at the same time"
    order = [index for _, _, index in intervals]
    # with the turnstile, no process runs all of its turns before the others get any
    assert all(order.index(index) < len(order) - 6 for index in range(3)), order


def test_a_waiting_process_says_which_process_computes(tmp_path):
    holder = start_worker(tmp_path, "cookbook sl run-7", turns=1, work_s=3.0)
    time.sleep(1.0)  # the holder has taken the lease by now
    lease = compute_lease.ComputeLease(tmp_path)
    with lease.hold():
        pass
    holder.communicate(timeout=60)
    assert lease.waited_seconds > 0.5
    assert lease.waiting_for is None  # no longer waiting


def test_waiting_note_names_the_holder(tmp_path, monkeypatch):
    holder = start_worker(tmp_path, "the studio", turns=1, work_s=4.0)
    time.sleep(1.0)
    lease = compute_lease.ComputeLease(tmp_path)
    monkeypatch.setattr(compute_lease, "_lease", lease)
    import threading

    done = threading.Event()
    threading.Thread(target=lambda: (lease.hold().__enter__(), done.set()), daemon=True).start()
    deadline = time.monotonic() + 10
    note = None
    while note is None and time.monotonic() < deadline:
        note = compute_lease.waiting_note()
        time.sleep(0.1)
    holder.communicate(timeout=60)
    assert note is not None and note.startswith("waiting for the CPU: the studio (pid ")
    assert done.wait(10)


def test_a_process_killed_while_holding_the_lease_frees_it(tmp_path):
    holder = start_worker(tmp_path, "doomed", turns=1, work_s=60.0)
    time.sleep(1.0)
    assert (tmp_path / compute_lease.LOCK_NAME).read_text().startswith("doomed (pid ")  # it holds the lease
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    started = time.monotonic()
    with compute_lease.ComputeLease(tmp_path).hold():
        pass
    assert time.monotonic() - started < 5.0


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, b"the test's holder", 0)
print("held", flush=True)
time.sleep(1.5)
released = time.time()
fcntl.flock(fd, fcntl.LOCK_UN)
print(released, flush=True)
"""


def test_the_model_worker_computes_only_while_it_holds_the_machines_lease(default_model_ready):
    """The studio's, the CLI's and `cookbook serve`'s runs all compute on the local model worker: while another
    process holds the lease, the worker's next request waits for it (and its compute time does not count the wait,
    which speed.calibrate relies on)."""
    from cookbook_engine import models
    from cookbook_engine.backends.local import get_worker

    worker = get_worker(models.DEFAULT_MODEL)
    worker.call(lambda: None)  # loaded
    lock_path = os.readlink(f"/proc/self/fd/{compute_lease.lease()._open()[1]}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, lock_path], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        submitted_at = time.time()
        request = worker.submit(time.time)
        computed_at = request.result()
        released_at = float(holder.stdout.readline())
    finally:
        holder.wait(timeout=60)
    assert computed_at >= released_at
    # what the request computed leaves out its wait, so a speed measured beside other runs is this machine's speed
    assert request.compute_seconds is not None and request.compute_seconds < released_at - submitted_at


def test_every_studio_home_of_a_user_shares_one_private_lease_folder(tmp_path, monkeypatch):
    """A CLI run with another COOKBOOK_HOME (or a test's temporary home) still takes turns with the studio."""
    monkeypatch.delenv("COOKBOOK_COMPUTE_LEASE_DIR", raising=False)
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "one"))
    first = compute_lease.machine_folder()
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "two"))
    assert compute_lease.machine_folder() == first
    assert first.stat().st_mode & 0o777 == 0o700 and first.stat().st_uid == os.getuid()
    monkeypatch.setenv("COOKBOOK_COMPUTE_LEASE_DIR", str(tmp_path / "elsewhere"))
    assert compute_lease.machine_folder() == tmp_path / "elsewhere"


def test_the_run_page_says_which_process_computes_while_a_run_waits_for_its_turn(tmp_path, monkeypatch):
    from app import timing

    monkeypatch.setenv("COOKBOOK_COMPUTE_LEASE_DIR", str(tmp_path))
    lock_path = tmp_path / compute_lease.LOCK_NAME
    lock_path.touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace("the test's holder", "cookbook rl (pid 4242)"), str(lock_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    waiting_run = {"status": "running", "owner_pid": os.getpid(), "owner_host": None}
    try:
        assert holder.stdout.readline().strip() == "held"
        assert compute_lease.holder_now() == ("cookbook rl (pid 4242)", 4242)
        assert timing.turn_text(waiting_run).startswith("taking turns on the CPU: cookbook rl (pid 4242) is computing")
        assert timing.turn_text({**waiting_run, "owner_pid": 4242}) == ""  # the holder's own run is not waiting
        assert timing.turn_text({**waiting_run, "status": "completed"}) == ""
        holder.stdout.readline()  # released
    finally:
        holder.wait(timeout=60)
    assert compute_lease.holder_now() is None and timing.turn_text(waiting_run) == ""
