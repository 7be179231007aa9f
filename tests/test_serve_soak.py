"""`cookbook serve` over time, with the real tinker SDK: 50 sessions opened one after another against a real server
(a child process), each training and sampling a little, half closing and half just ending their heartbeats
(benchmarks/serve_soak.py's `soak()`, with a 15 s expiry instead of 60 s so the test runs in minutes). The server's
memory holds flat: its RSS after session 50 is at most GROWTH_AFTER_5_MB above its RSS after session 5 (the silent
sessions still inside their expiry window hold their adapter, optimizer state and sampler snapshot, ~18 MB each here,
and the allocator keeps its high-water mark) and at most GROWTH_AFTER_25_MB above session 25 (flat once sessions
expire as fast as new ones start). With freeing disabled each session added ~18 MB for good (+266 MB from session 5
to 20), and the issue saw ~100 MB a session with tinker-cookbook's recipes (0.58 GB -> 6.4 GB after 28 sessions).
The test and its server use a compute lease folder of their own (COOKBOOK_COMPUTE_LEASE_DIR): it measures memory,
not turn-taking, and on a shared machine it would otherwise wait behind every other process's model work.
Every session ends: those that closed as "closed: success", those whose heartbeats stopped as "expired: no heartbeat
for 15 s", and each one's studio run ends completed (none had work queued when its client stopped)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import serve_soak  # noqa: E402
from test_serve import free_port  # noqa: E402

SESSIONS = 50
SESSION_TIMEOUT_S = 15.0  # above the SDK's 10 s heartbeat period, as a live client needs
GROWTH_AFTER_5_MB = 300.0
GROWTH_AFTER_25_MB = 60.0


@pytest.mark.slow
def test_fifty_sdk_sessions_hold_the_servers_memory_flat_and_silent_ones_expire(
    home, default_model_ready, monkeypatch, tmp_path
):
    monkeypatch.setenv("COOKBOOK_COMPUTE_LEASE_DIR", str(tmp_path / "lease"))
    result = serve_soak.soak(SESSIONS, SESSION_TIMEOUT_S, free_port())
    for row in serve_soak.summary_rows(result):
        print(*row)
    rss = [round(s.rss_mb_after) for s in result.sessions]
    print("server RSS MB after each session:", rss)
    assert result.rss_after(SESSIONS) - result.rss_after(5) <= GROWTH_AFTER_5_MB, rss
    assert result.rss_after(SESSIONS) - result.rss_after(25) <= GROWTH_AFTER_25_MB, rss
    closed = [s for s in result.sessions if s.ends_by == "close"]
    silent = [s for s in result.sessions if s.ends_by == "no heartbeat"]
    assert len(closed) == len(silent) == SESSIONS // 2
    assert all(str(s.end_note).endswith("(closed: success)") for s in closed), [s.end_note for s in closed]
    assert all(str(s.end_note).endswith(f"(expired: no heartbeat for {SESSION_TIMEOUT_S:g} s)") for s in silent), [
        s.end_note for s in silent
    ]
    assert {s.status for s in result.sessions} == {"completed"}
