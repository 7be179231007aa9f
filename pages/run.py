"""Run: one run's live charts, progress, config, checkpoints, log, and its error if it failed."""

import pandas as pd
import streamlit as st

from app import actions, charts, nav, run_view, settings_view, state, state_keys, timing, transcripts_view, widgets
from cookbook_engine import config as cfg
from storage import statuses
from storage.statuses import RunStatus

store = state.store()
runs = store.list_runs()
widgets.show_notice()
widgets.check_address("run", [r["run_id"] for r in runs], "run")  # a deleted or mistyped run: say so, and stop
if not runs:
    st.title("Run")
    widgets.empty_state("No runs yet.", "new_run", "Start a new run")
    st.stop()
title_column, badge_column, picker_column = st.columns([5, 1.2, 2.5], vertical_alignment="bottom")
with picker_column:
    run_id = widgets.run_picker("Run", runs, default_id=st.session_state.get(state_keys.LAST_RUN))
run = store.get_run(run_id)
if run is None:  # deleted from another tab a moment ago
    widgets.gone("run", run_id)
st.session_state[state_keys.LAST_RUN] = run_id
title_column.title(widgets.safe_markdown(run["name"]))
with badge_column:
    widgets.status_badge(run["status"])


def live_header(run_id: str) -> None:
    """Kind, model, age, elapsed time, time left and the training process's CPU and memory, refreshed live."""
    run = state.store().get_run(run_id)
    if run is None:  # deleted from another tab: the whole page says so
        st.rerun()
    details = run_view.header_facts(
        run,
        widgets.KIND_LABEL[run["kind"]],
        widgets.age(run["created_at"]),
        timing.time_facts(run, timing.run_timing(store, run)),
    )
    st.caption(" · ".join(widgets.safe_markdown(d) for d in details))
    usage = timing.usage_text(run)
    if usage:
        st.caption(f":material/memory: {usage}")
    turn = timing.turn_text(run)
    if turn:
        st.caption(f":material/hourglass_top: {widgets.safe_markdown(turn)}")


widgets.fragment(run_every=2 if run["status"] in statuses.ACTIVE else None)(live_header)(run_id)

# --- actions --------------------------------------------------------------------------------------------------
c1, c2, c3, c4, c5, c6 = st.columns(6)
if c1.button(
    "Stop",
    icon=":material/stop:",
    disabled=not actions.can_stop(run),
    width="stretch",
    help="Stops after the current step and saves a checkpoint, so it can be resumed.",
):
    actions.stop([run])
    st.rerun()
if c2.button("Resume", icon=":material/play_arrow:", disabled=not actions.can_resume(run), width="stretch"):
    actions.resume([run])
    st.rerun()
if c3.button(
    "Duplicate", icon=":material/content_copy:", width="stretch", help="Open the New run form with this run's settings"
):
    actions.duplicate(run)
if c4.button(
    "Chat with it",
    icon=":material/chat:",
    width="stretch",
    disabled=run["status"] not in statuses.ACTIVE and not store.list_checkpoints(run_id),
):
    st.session_state[state_keys.CHAT_TARGET_REQUEST] = run_id
    nav.go("chat", run=run_id)
if c5.button(
    "Transcripts",
    icon=":material/forum:",
    width="stretch",
    disabled=run["kind"] not in transcripts_view.TRANSCRIPT_KINDS,
):
    nav.go("transcripts", run=run_id)
if c6.button("Delete", icon=":material/delete:", width="stretch"):
    actions.ask_delete([run], "run")
actions.confirm_pending_delete()

if run["status"] in statuses.WENT_WRONG and run.get("error"):
    widgets.error_text(run["error"])
    if run.get("traceback"):
        with st.expander("Traceback"):
            st.code(run["traceback"], language=None)


def chart_grid(metrics: pd.DataFrame, groups: run_view.ChartGroups, per_row: int, prefix: str) -> None:
    for row in run_view.rows_of(groups, per_row):
        for column, (title, names) in zip(st.columns(per_row), row):
            column.plotly_chart(
                charts.metrics_chart(metrics, names, title), key=f"{prefix}-{title}", config={"displaylogo": False}
            )


def live_overview(run_id: str, was_active: bool) -> None:
    run = state.store().get_run(run_id)  # state.store(): a run whose process died shows as interrupted
    if run is None:  # deleted from another tab: the whole page says so
        st.rerun()
    active = run["status"] in statuses.ACTIVE
    if was_active and not active:
        st.rerun()  # finished: redraw the whole page (status, buttons, checkpoints) and stop refreshing
    progress = widgets.progress_fraction(run)
    label = f"{run.get('step') or 0} of {run['total_steps']} steps done" if run.get("total_steps") else "starting…"
    if run["status"] == RunStatus.QUEUED:
        label = "queued: waiting for the model worker"
    st.progress(progress, text=label)
    metrics = store.get_metrics(run_id)
    if metrics.empty:
        st.info(
            f"The first step is running ({timing.since_start_text(run)}): its metrics appear when it finishes. "
            "The first step also loads the model and the data."
            if active
            else "This run logged no metrics.",
            icon=":material/hourglass_top:",
        )
        return
    cards = run_view.metric_cards(metrics)
    for column, card in zip(st.columns(max(1, len(cards))), cards):
        column.metric(card.name, card.value, delta=card.delta, delta_color="off", border=True, help=card.raw_name)
    layout = run_view.chart_layout(metrics)
    chart_grid(metrics, layout.main, 2, "chart")
    flat = run_view.unchanged(metrics)
    if flat:
        st.caption("Unchanged: " + ", ".join(f"{name} = {value:.4g}" for name, value in flat.items()))
    for label, groups, prefix in (
        (f"More metrics ({len(layout.more)} charts)", layout.more, "more"),
        ("Timing and throughput", layout.timing, "sys"),
    ):
        if groups:
            with st.expander(label):
                chart_grid(metrics, groups, 3, prefix)
    if active:
        st.caption(":material/autorenew: Live: refreshing every 2 s.")


overview, config_tab, checkpoints_tab, log_tab = st.tabs(["Overview", "Config", "Checkpoints", "Log"])
with overview:
    is_active = run["status"] in statuses.ACTIVE
    widgets.fragment(run_every=2 if is_active else None)(live_overview)(run_id, is_active)
with config_tab:
    config = cfg.from_dict(run["kind"], run["config"])
    st.markdown("Start the same run from a terminal, in the repository folder:")
    st.code(settings_view.command_line(config), language="bash", wrap_lines=True)
    st.json(settings_view.shown_settings(run["kind"], run["config"]), expanded=True)
with checkpoints_tab:
    checkpoints = store.list_checkpoints(run_id)
    if not checkpoints:
        st.info(run_view.no_checkpoints_text(run["config"]), icon=":material/info:")
    else:
        st.dataframe(run_view.checkpoint_rows(checkpoints, widgets.age), hide_index=True, width="stretch")
        nav.link("checkpoints", "Export or download a checkpoint", ":material/download:", run=run_id)
with log_tab:
    lines = run_view.log_tail(run["log_dir"])
    if lines:
        st.code("\n".join(lines), language=None)
    else:
        st.caption("No log lines yet.")
    st.caption(f"Run folder: {run['log_dir']} (config.json, metrics.jsonl, checkpoints.jsonl, log.txt)")
