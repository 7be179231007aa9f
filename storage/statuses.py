"""The one home of the statuses a run, an evaluation job, a sweep or a sweep member goes through, and their groups.

They are `StrEnum`s, so a member is the very string stored in DuckDB ("running" == RunStatus.RUNNING), and a
status read back from the database compares equal to the member (also inside sets and dict keys). The groups are
tuples of members, named for the question they answer ("can it still change?", "can it be resumed?").
Here, not in the engine, because storage checks the values it stores and must not import cookbook_engine; the
engine, the studio and the CLI import this module. Not here: how a status is shown (app/widgets.py).
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run (or an evaluation job, a sweep, a sweep member) is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"  # a request: another process (the studio) asks the owner of a running run to stop
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the process running it ended without saying how


ALL = tuple(RunStatus)
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING)  # may still change: poll it, show it live
STOPPABLE = (RunStatus.QUEUED, RunStatus.RUNNING)  # a stop can still be asked for
TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INTERRUPTED)  # ended: finished_at
RESUMABLE = (RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.INTERRUPTED)  # ended early: can go on from a save
WENT_WRONG = (RunStatus.FAILED, RunStatus.INTERRUPTED)  # ended by an error: show it
ENDED_AS_ASKED = (RunStatus.COMPLETED, RunStatus.CANCELLED)  # the CLI exits 0 for these


class SessionEnd(StrEnum):
    """How a Tinker-style training session was closed (`ServiceClient.close(status)`), not a run status."""

    SUCCESS = "success"
    ERRORED = "errored"
    INTERRUPTED = "interrupted"


def run_status_after(session_end: str) -> RunStatus:
    """The status of the studio run that records a session once the session ends this way."""
    after: dict[str, RunStatus] = {SessionEnd.SUCCESS: RunStatus.COMPLETED, SessionEnd.ERRORED: RunStatus.FAILED}
    return after.get(session_end, RunStatus.INTERRUPTED)
