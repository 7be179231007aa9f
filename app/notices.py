"""Toasts for the runs started in this browser session: when one finishes or fails, a toast says so on whatever
page is open. The New run and Run pages call `watch(run_id)` when they start or resume a run; app/main.py redraws
`toast_finished_runs` every few seconds while any is watched. Nothing here changes a run."""

from __future__ import annotations

import streamlit as st

from app import state, state_keys, widgets
from storage.statuses import RunStatus

FINISHED_TOAST = {
    RunStatus.COMPLETED: ("finished", ":material/check_circle:"),
    RunStatus.FAILED: ("failed", ":material/error:"),
    RunStatus.CANCELLED: ("stopped", ":material/stop_circle:"),
    RunStatus.INTERRUPTED: ("was interrupted", ":material/warning:"),
}  # one per terminal status


def watch(run_id: str) -> None:
    st.session_state.setdefault(state_keys.WATCHED_RUNS, set()).add(run_id)


def watching() -> bool:
    return bool(st.session_state.get(state_keys.WATCHED_RUNS))


def toast_finished_runs() -> None:
    watched = st.session_state.setdefault(state_keys.WATCHED_RUNS, set())
    for run_id in sorted(watched):
        run = state.store().get_run(run_id)
        if run is None:
            watched.discard(run_id)
        elif run["status"] in FINISHED_TOAST:
            watched.discard(run_id)
            words, icon = FINISHED_TOAST[run["status"]]
            error = f": {run['error']}" if run.get("error") else ""
            st.toast(widgets.safe_markdown(f"Run {run['name']} {words}{error}"), icon=icon)
