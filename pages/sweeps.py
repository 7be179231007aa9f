"""Sweeps: write a grid or a list of configurations, start it, and read one table per sweep: the settings that
differ, each member's training metric and its eval metrics with intervals. Members train one after another in the
background (also when started with `cookbook sweep`); a sweep can be cancelled and resumed."""

import streamlit as st

from app import widgets
from cookbook_engine.evals import sweeps
from storage import statuses

st.title("Sweeps")
st.caption(
    "Train several configurations in turn and evaluate each on the same eval sets. Settings are the "
    "`cookbook sl|dpo|rl` keys; `grid` combines every listed value, `configs` lists members one by one."
)
runner = sweeps.get_sweep_runner()

with st.form("sweep-form"):
    text = st.text_area("Sweep (YAML)", sweeps.EXAMPLE, height=220)
    start = st.form_submit_button("Start sweep", type="primary", icon=":material/play_arrow:")
if start:
    try:
        plan = sweeps.plan(sweeps.parse_text(text))
    except ValueError as exc:
        widgets.error_text(str(exc))
    else:
        st.query_params["sweep"] = runner.start(plan)

all_sweeps = runner.store.list_sweeps()
widgets.check_address("sweep", [s["sweep_id"] for s in all_sweeps], "sweep")  # deleted or mistyped: say so, stop
if not all_sweeps:
    st.info("No sweeps yet: edit the example above and press Start sweep.", icon=":material/info:")
    st.stop()
picked = widgets.row_picker("Sweep", all_sweeps, "sweep_id", "sweep", lambda s: f"{s['name']} · {s['status']}")
sweep_id = picked["sweep_id"]


@st.fragment(run_every=3 if picked["status"] in statuses.ACTIVE else None)
def sweep_table() -> None:
    sweep = runner.store.get_sweep(sweep_id)
    if sweep is None:  # deleted meanwhile
        return
    c1, c2 = st.columns([4, 1], vertical_alignment="center")
    with c1:
        widgets.status_badge(sweep["status"])
    if sweep["status"] in statuses.STOPPABLE and runner.is_alive(sweep_id):
        if c2.button("Cancel sweep", icon=":material/stop:", width="stretch"):
            runner.cancel(sweep_id)
            st.rerun()
    elif sweep["status"] in statuses.RESUMABLE or (
        sweep["status"] in statuses.ACTIVE and not runner.is_alive(sweep_id)
    ):
        if c2.button("Resume sweep", icon=":material/play_arrow:", width="stretch"):
            runner.resume(sweep_id)
            st.rerun()
    if sweep.get("error"):
        widgets.error_text(sweep["error"])
    done = sum(m["status"] in statuses.TERMINAL for m in sweep["members"])
    st.caption(
        f"{done} of {len(sweep['members'])} members finished · evaluated on "
        f"{', '.join(sweep['spec'].get('evals') or ['nothing'])}"
    )
    table = sweeps.table(runner.store, sweep_id)
    st.dataframe(table, hide_index=True, width="stretch")
    st.download_button(
        "Download the table (CSV)",
        table.to_csv(index=False),
        file_name=f"{sweep_id}.csv",
        mime="text/csv",
        icon=":material/download:",
    )


sweep_table()
