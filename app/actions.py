"""What a person can do to runs from the Runs and Run pages: stop, resume, duplicate as a new run, delete.

Each action goes through the engine's RunManager and reports back with a one-shot notice; deleting asks for
confirmation in a dialog first. Nothing here trains or writes SQL.
"""

from __future__ import annotations

import streamlit as st

from app import forms, nav, state, widgets

RESUMABLE = ("cancelled", "failed", "interrupted")


def can_stop(run: dict) -> bool:
    return run["status"] in ("queued", "running")


def can_resume(run: dict) -> bool:
    return run["status"] in RESUMABLE


def stop(runs: list[dict]) -> None:
    stopped = [r["name"] for r in runs if can_stop(r)]
    for run in runs:
        if can_stop(run):
            state.manager().cancel(run["run_id"])
    if stopped:
        widgets.notice(f"Asked {', '.join(stopped)} to stop: it saves a checkpoint after the current step, so it "
                       "can be resumed.", "info")


def resume(runs: list[dict]) -> None:
    resumed, problems = [], []
    for run in runs:
        if not can_resume(run):
            continue
        try:
            state.manager().resume(run["run_id"])
            resumed.append(run["name"])
        except (KeyError, ValueError, ImportError, *forms.input_errors()) as exc:
            problems.append(f"{run['name']}: {str(exc).strip(chr(39))}")
    if problems:
        widgets.notice("Could not resume " + "; ".join(problems), "error")
    elif resumed:
        widgets.notice(f"Resumed {', '.join(resumed)} from its last checkpoint.")


def duplicate(run: dict) -> None:
    """Open the New run page with this run's settings filled in."""
    config = dict(run["config"])
    config["name"] = ""
    st.session_state["new_run_base"] = {"kind": run["kind"], "config": config, "name": run["name"]}
    st.session_state["form_generation"] = st.session_state.get("form_generation", 0) + 1
    nav.go("new_run")


@st.dialog("Delete runs?")
def confirm_delete(runs: list[dict]) -> None:
    active = [r for r in runs if state.manager().is_alive(r["run_id"]) or r["status"] in widgets.ACTIVE]
    deletable = [r for r in runs if r not in active]
    if active:
        st.warning("Stop these first: " + ", ".join(r["name"] for r in active), icon=":material/warning:")
    if not deletable:
        return
    st.markdown("This removes the runs' metrics, transcripts, checkpoints records and run folders. "
                "It cannot be undone.")
    for run in deletable:
        st.text(f"• {run['name']} ({run['status']})")
    if st.button(f"Delete {len(deletable)} run{'s' if len(deletable) > 1 else ''}", type="primary",
                 icon=":material/delete:", key="confirm-delete"):
        for run in deletable:
            state.manager().delete(run["run_id"])
        widgets.notice(f"Deleted {', '.join(r['name'] for r in deletable)}.")
        if st.session_state.get("deleting_from") == "run":
            nav.go("runs")
        st.rerun()
