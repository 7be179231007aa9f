"""The speed calibration on the real default model: what it caches for the New run estimate, and that a
calibration taken while other work uses the CPU caches nothing (it once cached 66 training tokens/s beside a CLI run
on a machine that trains 221 alone, and the estimate said 27.7 min for a 4.5-min run for the next six hours).

The other work here is real processes: spinning Python processes (which take no compute lease, as a build or a
browser would not) and a process that takes turns on the compute lease while using no CPU at all, so each check
sees only one of the two signs."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cookbook_engine import compute_lease, models, speed

SPIN = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"

LEASE_TAKER = """
import sys, time
from cookbook_engine import compute_lease
end = time.time() + 120
print("started", flush=True)
while time.time() < end:
    with compute_lease.lease().hold():
        time.sleep(0.3)  # holds the machine's turn without computing
    time.sleep(0.05)
"""


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    """The calibration's cache (and its note of a skipped calibration) in a temporary folder."""
    path = tmp_path / "speed.json"
    monkeypatch.setattr(speed, "_cache_file", lambda model: path)
    return path


def _started(*commands: str) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", command], stdout=subprocess.PIPE, text=True) for command in commands
    ]


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait(timeout=30)


def test_a_calibration_with_the_machine_to_itself_caches_the_speeds_the_estimate_reads(
    default_model_ready, cache_file, monkeypatch
):
    """The figures cached are real measurements of the model: positive, sampling slower than training's batched
    tokens, and `speeds()` reads them back with the time they were taken. (Whether the machine was idle is decided
    by MachineSharing, checked below with real other work; here it is told so, as the test cannot make a shared CI
    machine idle.)"""
    monkeypatch.setattr(speed.MachineSharing, "others_note", lambda self: "")
    before = time.time()
    measured = speed.calibrate(models.DEFAULT_MODEL)
    assert measured is not None and measured.train_tok_s > 0 and measured.eval_tok_s > measured.sample_tok_s > 0
    assert cache_file.exists() and speed.speeds(models.DEFAULT_MODEL) == measured
    assert measured.measured_at >= before and speed.skipped_because(models.DEFAULT_MODEL) is None


def test_processes_that_use_the_cpu_without_the_lease_make_the_machine_shared():
    """Half the cores this process may use kept busy by processes that take no compute lease (as a build or a
    browser would not), for a second, while this process waits."""
    sharing = speed.MachineSharing()
    spinners = _started(*[SPIN] * max(1, len(speed._our_cpus()) // 2))
    try:
        time.sleep(1.5)
        busy = sharing.others_note()
    finally:
        _stop(spinners)
    assert "other processes used" in busy


def test_a_calibration_while_another_process_takes_turns_on_the_lease_caches_nothing(
    default_model_ready, cache_file, monkeypatch
):
    """Another process holding the machine's compute turns (without using the CPU itself) is other work too: the
    calibration's units wait for it between each other, and the compute it stands for would slow them."""
    if not compute_lease.lease().enabled:
        pytest.skip("the compute lease is off in this process (COOKBOOK_COMPUTE_LEASE=off)")
    monkeypatch.setenv("COOKBOOK_COMPUTE_LEASE_DIR", str(compute_lease.machine_folder()))
    [taker] = _started(LEASE_TAKER)
    try:
        assert taker.stdout.readline().strip() == "started"
        assert speed.calibrate(models.DEFAULT_MODEL) is None
    finally:
        _stop([taker])
    assert not cache_file.exists()
    assert speed.speeds(models.DEFAULT_MODEL) == speed.IDLE_2_CORE  # the estimate keeps the figures it had
    why = speed.skipped_because(models.DEFAULT_MODEL)
    assert why is not None and "another process computed" in why
    assert speed.calibrate_in_background(models.DEFAULT_MODEL) is False  # not again at once: it waits, then retries
    later = time.time() + speed.RETRY_AFTER_BUSY_S + 1
    monkeypatch.setattr(speed.time, "time", lambda: later)
    assert speed.skipped_because(models.DEFAULT_MODEL) is None
