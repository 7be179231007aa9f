"""Small UI pieces the studio's pages share: status badges, run tables and pickers, one-shot notices, safe text.

Model output and uploaded text are always drawn as text (st.text, st.code, or st.markdown on escaped text),
never as raw HTML. These helpers read what they show from the arguments they get; the pages fetch it from storage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal, NoReturn

import pandas as pd
import streamlit as st

from app import state_keys
from cookbook_engine import priority
from cookbook_engine.training.metric_names import KEY_METRIC, KEY_METRIC_SHORT
from storage.statuses import RunStatus

KIND_LABEL = {"sl": "SL", "dpo": "DPO", "rl": "RL", "distill": "Distill"}
BadgeColor = Literal["red", "orange", "yellow", "blue", "green", "violet", "gray", "grey", "primary"]  # st.badge's
# status -> (badge color, icon, color of its text in the runs table)
STATUS_STYLE: dict[str, tuple[BadgeColor, str | None, str]] = {
    RunStatus.QUEUED: ("gray", ":material/schedule:", "#6b7280"),
    RunStatus.RUNNING: ("blue", ":material/progress_activity:", "#1d4ed8"),
    RunStatus.CANCELLING: ("orange", ":material/pause_circle:", "#c2410c"),
    RunStatus.COMPLETED: ("green", ":material/check_circle:", "#15803d"),
    RunStatus.FAILED: ("red", ":material/error:", "#b91c1c"),
    RunStatus.CANCELLED: ("gray", ":material/stop_circle:", "#6b7280"),
    RunStatus.INTERRUPTED: ("orange", ":material/warning:", "#c2410c"),
}


def fragment(run_every: float | None = None) -> Callable[[Callable], Callable]:
    """st.fragment, drawn below the studio's priority like the rest of a page: a fragment's own rerun (a live
    refresh every few seconds) draws on a fresh script thread that app/main.py never ran on
    (cookbook_engine/priority.py)."""

    def decorate(draw: Callable) -> Callable:
        @functools.wraps(draw)  # Streamlit tells fragments apart by the function's name
        def lowered(*args, **kwargs):
            priority.lower_this_thread()
            return draw(*args, **kwargs)

        return st.fragment(run_every=run_every)(lowered)

    return decorate


def status_badge(status: str) -> None:
    color, icon, _ = STATUS_STYLE.get(status, ("gray", None, ""))
    st.badge(status, color=color, icon=icon)


def age(timestamp: datetime | None) -> str:
    """'just now', '5 min ago', '3 h ago', '2 days ago' for a naive-UTC timestamp."""
    if timestamp is None or pd.isna(timestamp):
        return ""
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    seconds = (datetime.now(UTC) - timestamp).total_seconds()
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"


def short_model(name: str) -> str:
    return name.rsplit("/", 1)[-1] if name else ""


def step_text(run: dict) -> str:
    step, total = run.get("step"), run.get("total_steps")
    if step is None and total is None:
        return ""
    return f"{step or 0}/{total}" if total else f"{step or 0}"


def progress_fraction(run: dict) -> float:
    step, total = run.get("step") or 0, run.get("total_steps") or 0
    if run.get("status") == RunStatus.COMPLETED:
        return 1.0
    return min(1.0, step / total) if total else 0.0


def format_value(value: float | None) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return f"{value:.4g}"


def runs_frame(runs: list[dict], key_values: dict[str, float], times: dict[str, dict] | None = None) -> pd.DataFrame:
    """The runs table: one row per run, in the given order; `times` adds each run's Time (timing.table_times)."""
    rows = []
    times = times or {}
    for run in runs:
        value = key_values.get(run["run_id"])
        rows.append(
            {
                "Run": run["name"],
                "Kind": KIND_LABEL.get(run["kind"], run["kind"]),
                "Status": run["status"],
                "Progress": progress_fraction(run),
                "Key metric": f"{KEY_METRIC_SHORT[run['kind']]} {format_value(value)}" if value is not None else "",
                "Time": times.get(run["run_id"], {}).get("Time", ""),
                "Age": age(run["created_at"]),
                "Model": short_model(run["base_model"]) + ("" if run["backend"] == "local" else f" ({run['backend']})"),
                "run_id": run["run_id"],
            }
        )
    return pd.DataFrame(rows, columns=[*RUNS_COLUMN_CONFIG])


def styled_runs(frame: pd.DataFrame):
    """The runs table with each status in its color."""
    return frame.style.map(
        lambda status: f"color: {STATUS_STYLE.get(status, (None, None, '#1f2330'))[2]}; font-weight: 600",
        subset=["Status"],
    )


# Each column's width in pixels, so that all of them fit beside the row checkboxes (about 35 px) in the page's
# content area at a laptop's 1440 px with the sidebar open (about 940 px). What a table of eleven columns lost
# there (Age and Model off-screen, issue 27): the step (the bar says how far; the run's page says the step), CPU and
# memory (a line under the table for the runs training; empty for every other row), and Elapsed and Left became one
# Time column (a finished run's time, an active run's time left).
RUNS_TABLE_FITS_PX = 940
RUNS_COLUMN_CONFIG = {
    "Run": st.column_config.TextColumn("Run", width=210),
    "Kind": st.column_config.TextColumn("Kind", width=60),
    "Status": st.column_config.TextColumn("Status", width=90),
    "Progress": st.column_config.ProgressColumn(
        "Progress",
        min_value=0.0,
        max_value=1.0,
        format="percent",
        width=95,
        help="Share of the run's steps done (its page shows the step)",
    ),
    "Key metric": st.column_config.TextColumn(
        "Key metric",
        width=110,
        help="At the latest step: "
        + "; ".join(f"{KIND_LABEL[kind]}: {KEY_METRIC_SHORT[kind]} = {metric}" for kind, metric in KEY_METRIC.items()),
    ),
    "Time": st.column_config.TextColumn(
        "Time",
        width=110,
        help="How long a finished run took; for an active run, the time left (from its own recent step times)",
    ),
    "Age": st.column_config.TextColumn("Age", width=78, help="When the run was created"),
    "Model": st.column_config.TextColumn("Model", width=152),
    "run_id": None,  # kept for selection, not shown
}


LIVE_REFRESH_S = 3  # how often the runs table and the home page's run summaries re-read storage


def key_metric_values(store, runs: list[dict]) -> dict[str, float]:
    """Each run's key metric at its latest step. Remembered (per browser session) until a run's status or step
    changes, so an idle studio's live tables re-read only the runs list per refresh (plus, on Home, the checkpoint
    count, and the orphan check at most every few seconds)."""
    signature = (str(getattr(store, "path", "")), tuple((r["run_id"], r["status"], r.get("step")) for r in runs))
    cached = st.session_state.get(state_keys.KEY_METRIC_VALUES)
    if cached is not None and cached[0] == signature:
        return cached[1]
    values: dict[str, float] = {}
    for kind, metric in KEY_METRIC.items():
        ids = [r["run_id"] for r in runs if r["kind"] == kind]
        if ids:
            values.update(store.last_metrics(ids, metric))
    st.session_state[state_keys.KEY_METRIC_VALUES] = (signature, values)
    return values


def run_label(run: dict) -> str:
    """Name, kind and model (not the status: a picker's labels should not change while a run trains)."""
    return f"{run['name']} · {KIND_LABEL.get(run['kind'], run['kind'])} · {short_model(run['base_model'])}"


def run_picker(
    label: str, runs: list[dict], query_key: str = "run", default_id: str | None = None, help: str | None = None
) -> str:
    """A selectbox of runs (newest first) that keeps the run the page's address names (`?run=ID`); see
    `picked_id`. Returns the chosen run id."""
    labels = {r["run_id"]: run_label(r) for r in runs}
    return picked_id(label, list(labels), labels.__getitem__, query_key, "run", default_id=default_id, help=help)


def row_picker(label: str, rows: list[dict], id_key: str, query_key: str, describe: Callable[[dict], str]) -> dict:
    """A selectbox over stored rows (evaluations, sweeps; newest first) that keeps the row the page's address names
    (`?query_key=ID`, as pages link to each other); see `picked_id`. Returns the chosen row."""
    by_id = {row[id_key]: row for row in rows}
    return by_id[picked_id(label, list(by_id), lambda i: describe(by_id[i]), query_key, query_key)]


def picked_id(
    label: str,
    ids: list[str],
    describe: Callable[[str], str],
    query_key: str,
    what: str,
    default_id: str | None = None,
    help: str | None = None,
) -> str:
    """A selectbox over `ids` that keeps the page on the one its address names (`?query_key=ID`) and writes the
    person's pick back into the address. An address naming an id that is not there (mistyped, or deleted from
    another tab) stops the page with an error naming it: the page never falls back to another row, so no button
    below it can act on a row the page was not opened for. With no id in the address it starts on `default_id` (when
    present) or the first (newest) row."""
    wanted = check_address(query_key, ids, what)
    start = wanted or (default_id if default_id in ids else ids[0])
    chosen = st.selectbox(
        label, ids, index=ids.index(start), format_func=describe, key=f"{query_key}-picker-{start}", help=help
    )
    if chosen not in ids:  # only a stale widget value; never act on another row
        gone(what, str(chosen))
    if chosen != wanted:
        st.query_params[query_key] = chosen
    return chosen


def check_address(query_key: str, ids: list[str], what: str) -> str | None:
    """The id the page's address names (`?query_key=ID`), or None; an id that is not among `ids` stops the page
    with an error naming it (`gone`). Pages that draw their picker inside columns call this first, so the error
    spans the page."""
    wanted = st.query_params.get(query_key)
    if wanted is not None and wanted not in ids:
        gone(what, wanted)
    return wanted


def gone(what: str, wanted: str) -> NoReturn:
    """Stop the page with an error naming the missing run (evaluation, sweep) and a way back to the list."""
    from app import nav

    noun = GONE_NOUN.get(what, what)
    error_text(
        f"There is no {noun} {wanted}: it was deleted (perhaps in another tab), or the address is mistyped. "
        f"Nothing on this page acts on another {noun} in its place."
    )
    if what == "run":
        nav.link("runs", "All runs", ":material/monitoring:")
    elif st.button(f"Show the newest {noun}", icon=":material/undo:"):
        del st.query_params[what]
        st.rerun()
    st.stop()


GONE_NOUN = {"eval": "evaluation"}


def answer_columns(table: pd.DataFrame) -> dict:
    """Column widths for an answers table (prompt, reference, then each model's output and correctness), so two
    models' answers and their marks fit a 1400 px window (tests/test_browser_evaluate_wide.py): the prompt and the
    outputs medium; idx, the reference (an answer key, short) and the marks small."""
    config: dict = {"idx": st.column_config.NumberColumn("#", width="small")}
    for column in table.columns:
        if column.endswith("correct"):
            config[column] = st.column_config.NumberColumn(column.replace(" · correct", " ✓"), width="small")
        elif column == "reference":
            config[column] = st.column_config.TextColumn(column, width="small")
        elif column != "idx":
            config[column] = st.column_config.TextColumn(column, width="medium")
    return config


def notice(message: str, kind: str = "success") -> None:
    """Queue a message to show once at the top of the next page drawn (survives st.switch_page)."""
    st.session_state[state_keys.NOTICE] = (kind, message)


def show_notice() -> None:
    queued = st.session_state.pop(state_keys.NOTICE, None)
    if queued:
        kind, message = queued
        {"success": st.success, "info": st.info, "warning": st.warning, "error": st.error}[kind](message)


_MARKDOWN_SPECIALS = frozenset("\\`*_{}[]()#+-.!|>~:$<&=")


def safe_markdown_stream(pieces):
    """Turn streamed text into markdown that shows exactly that text: every markdown/HTML special character is
    backslash-escaped, line breaks stay line breaks and leading spaces stay (as no-break spaces)."""
    at_line_start = True
    for piece in pieces:
        out = []
        for char in piece:
            if char == "\n":
                out.append("  \n")
                at_line_start = True
                continue
            if char == " " and at_line_start:
                out.append("\u00a0")
                continue
            at_line_start = False
            out.append("\\" + char if char in _MARKDOWN_SPECIALS else char)
        yield "".join(out)


def safe_markdown(text: str) -> str:
    """`text` as markdown that displays it literally (see safe_markdown_stream)."""
    return "".join(safe_markdown_stream([text]))


def plain_text(text: str, *, code: bool = False) -> None:
    """Show model output or uploaded text exactly as it is (never interpreted as markdown or HTML)."""
    if code:
        st.code(text, language=None, wrap_lines=True)
    else:
        st.text(text)


def error_text(text: str, icon: str = ":material/error:") -> None:
    """An error box whose message (which often quotes a file name, a row or a setting someone typed) shows
    literally: escaped, never interpreted as markdown or HTML."""
    st.error(safe_markdown(text), icon=icon)


def empty_state(message: str, link_key: str | None = None, link_label: str | None = None) -> None:
    from app import nav

    st.info(message, icon=":material/info:")
    if link_key:
        nav.link(link_key, link_label)
