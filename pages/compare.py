"""Compare: overlay one metric across runs (with smoothing and log scale) and see how their settings differ."""

import pandas as pd
import streamlit as st

from app import charts, settings_view, state, widgets
from cookbook_engine.training.metric_names import key_metric

st.title("Compare runs")
store = state.store()
runs = store.list_runs()
if not runs:
    widgets.empty_state("No runs to compare yet.", "new_run", "Start a new run")
    st.stop()

by_id = {r["run_id"]: r for r in runs}
names = [r["name"] for r in runs]
label = {r["run_id"]: r["name"] if names.count(r["name"]) == 1 else f"{r['name']} ({r['run_id'][-4:]})" for r in runs}
# by default the newest run and up to two more of its kind (their metrics share names)
default = [r["run_id"] for r in runs if r["kind"] == runs[0]["kind"]][:3]
chosen = st.multiselect(
    "Runs",
    list(by_id),
    default=default,
    format_func=lambda i: widgets.run_label(by_id[i]),
    key="compare-runs",
    placeholder="Pick runs to compare",
)
if not chosen:
    st.info("Pick one or more runs.", icon=":material/info:")
    st.stop()

metric_names = sorted({name for run_id in chosen for name in store.metric_names(run_id)})
if not metric_names:
    st.info("These runs have no metrics yet.", icon=":material/hourglass_top:")
else:
    first_key_metric = key_metric(by_id[chosen[0]]["kind"])
    c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
    metric = c1.selectbox(
        "Metric",
        metric_names,
        key="compare-metric",
        index=metric_names.index(first_key_metric) if first_key_metric in metric_names else 0,
    )
    smoothing = c2.slider(
        "Smoothing",
        0.0,
        0.99,
        0.0,
        0.01,
        key="compare-smoothing",
        help="Exponential moving average, as in TensorBoard; the raw curve stays faint behind.",
    )
    log_y = c3.toggle("Log scale", key="compare-log")
    series = {}
    for run_id in chosen:
        frame = store.get_metrics(run_id, [metric])
        if not frame.empty:
            series[label[run_id]] = frame[["step", "value"]]
    if series:
        st.plotly_chart(
            charts.overlay_chart(series, metric, smoothing, log_y), key="compare-chart", config={"displaylogo": False}
        )
        summary = [
            {
                "Run": name,
                "Steps logged": len(frame),
                "First": widgets.format_value(frame["value"].iloc[0]),
                "Last": widgets.format_value(frame["value"].iloc[-1]),
                "Min": widgets.format_value(frame["value"].min()),
                "Max": widgets.format_value(frame["value"].max()),
            }
            for name, frame in series.items()
        ]
        st.dataframe(summary, hide_index=True, width="stretch")
    missing = [label[i] for i in chosen if label[i] not in series]
    if missing:
        st.caption(widgets.safe_markdown(f"No {metric} in: {', '.join(missing)}"))

st.subheader("Settings")
configs = {
    label[i]: {
        "kind": by_id[i]["kind"],
        "status": by_id[i]["status"],
        **settings_view.shown_settings(by_id[i]["kind"], by_id[i]["config"]),
    }
    for i in chosen
}
keys = sorted({k for c in configs.values() for k in c})
show_all = st.toggle("Show all settings, not only the differences", key="compare-all")
rows = []
for k in keys:
    values = [configs[name].get(k, "—") for name in configs]
    if show_all or len({str(v) for v in values}) > 1:
        rows.append({"Setting": k, **{name: str(v) for name, v in zip(configs, values)}})
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
else:
    st.caption("The selected runs have identical settings." if len(chosen) > 1 else "Pick a second run to diff.")
