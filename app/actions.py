"""What a person can do to runs from the Runs and Run pages: stop, resume, duplicate as a new run, delete.

Each action goes through the engine's RunManager and reports back with a one-shot notice; deleting asks for
confirmation in a dialog first, which says what goes (run folder, checkpoint folders, exports) and how much space
that frees. Nothing here trains or writes SQL.
"""

from __future__ import annotations

import streamlit as st

from app import forms, nav, notices, state, state_keys, widgets
from cookbook_engine import paths
from storage import statuses
from storage.input_error import BAD_INPUT

RESUME_ERRORS: tuple[type[Exception], ...] = (KeyError, ValueError, ImportError, *BAD_INPUT)  # shown, not raised


def runs_table_key() -> str:
    """The runs table's widget key: a new one starts with nothing selected."""
    return state_keys.runs_table(st.session_state.get(state_keys.RUNS_TABLE_GENERATION, 0))


def clear_selection() -> None:
    st.session_state[state_keys.RUNS_TABLE_GENERATION] = st.session_state.get(state_keys.RUNS_TABLE_GENERATION, 0) + 1


def can_stop(run: dict) -> bool:
    return run["status"] in statuses.STOPPABLE


def can_resume(run: dict) -> bool:
    return run["status"] in statuses.RESUMABLE


def stop(runs: list[dict]) -> None:
    stopped = [r["name"] for r in runs if can_stop(r)]
    for run in runs:
        if can_stop(run):
            state.manager().cancel(run["run_id"])
    if stopped:
        widgets.notice(
            f"Asked {widgets.safe_markdown(', '.join(stopped))} to stop: it saves a checkpoint after the "
            "current step, so it can be resumed.",
            "info",
        )


def resume(runs: list[dict]) -> None:
    resumed, problems = [], []
    for run in runs:
        if not can_resume(run):
            continue
        try:
            state.manager().resume(run["run_id"])
            notices.watch(run["run_id"])
            resumed.append(run["name"])
        except RESUME_ERRORS as exc:
            problems.append(f"{run['name']}: {str(exc).strip(chr(39))}")
    if problems:
        widgets.notice("Could not resume " + widgets.safe_markdown("; ".join(problems)), "error")
    elif resumed:
        widgets.notice(f"Resumed {widgets.safe_markdown(', '.join(resumed))} from its last checkpoint.")


def duplicate(run: dict) -> None:
    """Open the New run page with this run's settings filled in."""
    config = dict(run["config"])
    config["name"] = ""
    open_new_run(run["kind"], config, run["name"])


def open_new_run(kind: str, config: dict, name: str) -> None:
    """Open the New run page with these settings filled in (new widget keys, so the form shows them)."""
    st.session_state[state_keys.NEW_RUN_BASE] = {"kind": kind, "config": config, "name": name}
    st.session_state[state_keys.NEW_RUN_KIND] = kind
    forms.start_over()  # what the form held before gives way to these settings
    nav.go("new_run")


def ask_delete(runs: list[dict], origin: str) -> None:
    """Remember which runs to delete and redraw the page: `confirm_pending_delete()` then asks in a dialog."""
    st.session_state[state_keys.PENDING_DELETE] = {"ids": [r["run_id"] for r in runs], "origin": origin}
    st.rerun()


def _forget_pending_delete() -> None:
    st.session_state.pop(state_keys.PENDING_DELETE, None)


def confirm_pending_delete() -> None:
    """Show the confirmation dialog while a delete is pending (call once per page run, outside fragments)."""
    pending = st.session_state.get(state_keys.PENDING_DELETE)
    if not pending:
        return
    runs = [run for run in (state.store().get_run(run_id) for run_id in pending["ids"]) if run is not None]
    if not runs:
        _forget_pending_delete()
        return
    _confirm_delete(runs, pending["origin"])


def _what(found: list) -> str:
    """'run folder, 2 checkpoint folders, 1 export · 312.4 MB'."""
    from cookbook_engine import export

    exports = [p for p in found if p.parent == export.exports_dir()]
    checkpoints = [p for p in found if p not in exports and "checkpoints" in p.parts]
    parts = ["run folder"] if len(found) > len(exports) + len(checkpoints) else []
    if checkpoints:
        parts.append(f"{len(checkpoints)} checkpoint folder{'s' if len(checkpoints) != 1 else ''}")
    if exports:
        parts.append(f"{len(exports)} export{'s' if len(exports) != 1 else ''}")
    size = paths.human_size(sum(paths.size_of(p) for p in found))
    return f"{', '.join(parts) or 'no files'} · {size}"


@st.dialog("Delete runs?", on_dismiss=_forget_pending_delete)
def _confirm_delete(runs: list[dict], origin: str) -> None:
    active = [r for r in runs if state.manager().is_alive(r["run_id"]) or r["status"] in statuses.ACTIVE]
    deletable = [r for r in runs if r not in active]
    if active:
        st.warning(
            "Stop these first: " + ", ".join(widgets.safe_markdown(r["name"]) for r in active),
            icon=":material/warning:",
        )
    if deletable:
        files = {run["run_id"]: state.manager().files_of(run["run_id"]) for run in deletable}
        freed = sum(paths.size_of(path) for found in files.values() for path in found)
        st.markdown(
            "This removes the runs' metrics, transcripts and checkpoints, their run folders and the exports "
            f"made from them, freeing **{paths.human_size(freed)}**. It cannot be undone."
        )
        for run in deletable:
            st.text(f"• {run['name']} ({run['status']}): {_what(files[run['run_id']])}")
    c1, c2 = st.columns(2)
    if c1.button("Cancel", key="cancel-delete", width="stretch"):
        _forget_pending_delete()
        st.rerun()
    if deletable and c2.button(
        f"Delete {len(deletable)} run{'s' if len(deletable) > 1 else ''}",
        type="primary",
        icon=":material/delete:",
        key="confirm-delete",
        width="stretch",
    ):
        freed = sum(state.manager().delete(run["run_id"]) for run in deletable)
        _forget_pending_delete()
        widgets.notice(
            f"Deleted {widgets.safe_markdown(', '.join(r['name'] for r in deletable))} "
            f"({paths.human_size(freed)} freed)."
        )
        if origin == "run":
            nav.go("runs")
        st.rerun()
