"""Runs: every run with its kind, status, progress, key metric, time (taken, or left), age and model, and the CPU
and memory of the runs training; stop, resume, duplicate, delete."""

import streamlit as st

from app import actions, nav, state, state_keys, timing, widgets
from storage import statuses
from storage.statuses import RunStatus

c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
c1.title("Runs")
with c2:
    nav.link("new_run", "New run", ":material/add_circle:")
widgets.show_notice()

FILTERS = {
    "All": None,
    "Active": statuses.ACTIVE,
    "Completed": (RunStatus.COMPLETED,),
    "Failed": statuses.WENT_WRONG,
    "Cancelled": (RunStatus.CANCELLED,),
}
show = st.segmented_control(
    "Show", list(FILTERS), default="All", required=True, key="runs-filter", label_visibility="collapsed"
)


def runs_table() -> None:
    """Re-read every few seconds, active runs or not: a run started from the CLI appears without a click."""
    store = state.store()
    all_runs = store.list_runs()
    now_active = any(r["status"] in statuses.ACTIVE for r in all_runs)
    wanted = FILTERS[show]
    runs = [r for r in all_runs if wanted is None or r["status"] in wanted]
    if not runs:
        widgets.empty_state(
            "No runs here yet." if show == "All" else f"No {show.lower()} runs.", "new_run", "Start a new run"
        )
        return
    times = timing.table_times(store, runs)
    frame = widgets.runs_frame(runs, widgets.key_metric_values(store, runs), times)
    if st.session_state.get(state_keys.RUNS_TABLE_ROWS) != list(frame["run_id"]):  # rows moved: a selection would shift
        st.session_state[state_keys.RUNS_TABLE_ROWS] = list(frame["run_id"])
        actions.clear_selection()
    event = st.dataframe(
        widgets.styled_runs(frame),
        key=actions.runs_table_key(),
        on_select="rerun",
        selection_mode="multi-row",
        hide_index=True,
        column_config=widgets.RUNS_COLUMN_CONFIG,
        width="stretch",
    )
    by_id = {r["run_id"]: r for r in runs}
    for run in runs:  # a column of these would be empty in every other row
        if use := times[run["run_id"]]["Use"]:
            st.caption(f":material/memory: {widgets.safe_markdown(run['name'])} is training: {use}")
    chosen = [by_id[frame.iloc[i]["run_id"]] for i in event.selection.rows if i < len(frame)]
    if not chosen:
        st.caption("Select runs (the boxes on the left) to open, stop, resume, duplicate or delete them.")
    else:
        st.caption("Selected: " + ", ".join(widgets.safe_markdown(r["name"]) for r in chosen))
    one = len(chosen) == 1
    c1, c2, c3, c4, c5, _ = st.columns([1, 1, 1, 1.4, 1, 2])
    if c1.button("Open", icon=":material/open_in_new:", disabled=not one, width="stretch"):
        nav.go("run", run=chosen[0]["run_id"])
    if c2.button(
        "Stop", icon=":material/stop:", disabled=not any(actions.can_stop(r) for r in chosen), width="stretch"
    ):
        actions.stop(chosen)
        st.rerun()
    if c3.button(
        "Resume", icon=":material/play_arrow:", disabled=not any(actions.can_resume(r) for r in chosen), width="stretch"
    ):
        actions.resume(chosen)
        st.rerun()
    if c4.button("Duplicate as new", icon=":material/content_copy:", disabled=not one, width="stretch"):
        actions.duplicate(chosen[0])
    if c5.button("Delete", icon=":material/delete:", disabled=not chosen, width="stretch"):
        actions.ask_delete(chosen, "runs")
    if now_active:
        st.caption(f":material/autorenew: Live: refreshing every {widgets.LIVE_REFRESH_S} s.")


widgets.fragment(run_every=widgets.LIVE_REFRESH_S)(runs_table)()
actions.confirm_pending_delete()
