"""Sweeps: build a grid in a form, or write a grid or a list of configurations as YAML; check it, start it, and
read one table per sweep: the settings that differ, each member's training metric and its eval metrics with
intervals, each member's run a link. Members train one after another in the background (also when started with
`cookbook sweep`); a sweep can be cancelled and resumed."""

import streamlit as st

from app import sweep_form, widgets
from cookbook_engine.evals import sweeps
from storage import statuses

st.title("Sweeps")
st.caption(
    "Train several configurations in turn and evaluate each on the same eval sets. Settings are the "
    "`cookbook sl|dpo|rl` keys; `grid` combines every listed value, `configs` lists members one by one."
)
runner = sweeps.get_sweep_runner()


def check_or_start(read_spec, start: bool) -> None:
    """Plan the sweep (every member's settings checked); show the members, or start it."""
    try:
        plan = sweeps.plan(read_spec())
    except ValueError as exc:
        widgets.error_text(str(exc))
        return
    if start:
        st.query_params["sweep"] = runner.start(plan)
        return
    st.success(f"Ready to start: {len(plan.members)} members, each checked.", icon=":material/check_circle:")
    st.dataframe(sweep_form.members_table(plan), hide_index=True)
    st.caption("The same sweep as YAML (paste it into the YAML tab, or save it for `cookbook sweep FILE`):")
    st.code(sweep_form.as_yaml(plan.spec), language="yaml")


form_tab, yaml_tab = st.tabs(["Form", "YAML"])
with form_tab, st.form("sweep-builder"):
    c1, c2, c3, c4 = st.columns([2, 1, 2, 1])
    name = c1.text_input("Sweep name (optional)")
    kind = c2.selectbox("Kind", ["sl", "dpo", "rl"], format_func=widgets.KIND_LABEL.__getitem__)
    dataset = c3.text_input("Dataset", "builtin:facts", help="builtin:NAME, a file path, or hf:owner/name")
    max_steps = c4.number_input("Max steps", 1, 100_000, 20)
    st.markdown("**Settings to vary** (every combination becomes one member)")
    grid = st.data_editor(
        sweep_form.GRID_EXAMPLE,
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        column_config={
            "Setting": st.column_config.TextColumn(help="A `cookbook sl|dpo|rl` key, e.g. learning_rate, lora_rank"),
            "Values to try": st.column_config.TextColumn(help="Comma-separated, e.g. 3e-4, 1e-3"),
        },
    )
    evals = st.multiselect("Eval sets", sweep_form.eval_set_names(), default=["builtin:facts-probes"])
    log_to = st.multiselect(
        "Log to (experiment trackers)",
        sweep_form.TRACKERS,
        help=sweep_form.setting_help("log_to"),
        placeholder="none: the studio only",
    )
    include_base = st.checkbox("Also evaluate the base model (the table's first row)", value=True)
    c1, c2, _ = st.columns([1, 1, 4])
    # Keys, because the two forms' buttons share labels: without them their ids differ only by their form's, which
    # Streamlit leaves out whenever it sees no Runtime (AppTests drawn in parallel threads clear it for each other)
    form_check = c1.form_submit_button("Check", icon=":material/fact_check:", width="stretch", key="form-check")
    form_start = c2.form_submit_button(
        "Start sweep", type="primary", icon=":material/play_arrow:", width="stretch", key="form-start"
    )
if form_check or form_start:
    with form_tab:
        check_or_start(
            lambda: sweep_form.spec_from_form(
                name,
                kind,
                {
                    "dataset": dataset,
                    "max_steps": int(max_steps),
                    "save_every": 0,
                    "eval_every": 0,
                    "log_to": ",".join(log_to),
                },
                grid.to_dict("records"),
                evals,
                include_base,
            ),
            form_start,
        )
with yaml_tab, st.form("sweep-form"):
    text = st.text_area("Sweep (YAML)", sweeps.EXAMPLE, height=220)
    c1, c2, _ = st.columns([1, 1, 4])
    yaml_check = c1.form_submit_button("Check", icon=":material/fact_check:", width="stretch", key="yaml-check")
    yaml_start = c2.form_submit_button(
        "Start sweep", type="primary", icon=":material/play_arrow:", width="stretch", key="yaml-start"
    )
if yaml_check or yaml_start:
    with yaml_tab:
        check_or_start(lambda: sweeps.parse_text(text), yaml_start)

all_sweeps = runner.store.list_sweeps()
widgets.check_address("sweep", [s["sweep_id"] for s in all_sweeps], "sweep")  # deleted or mistyped: say so, stop
if not all_sweeps:
    st.info("No sweeps yet: edit the example above and press Start sweep.", icon=":material/info:")
    st.stop()
picked = widgets.row_picker("Sweep", all_sweeps, "sweep_id", "sweep", lambda s: f"{s['name']} · {s['sweep_id']}")
sweep_id = picked["sweep_id"]


@widgets.fragment(run_every=3 if picked["status"] in statuses.ACTIVE else None)
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
    st.dataframe(
        sweep_form.with_run_links(table),
        hide_index=True,
        width="stretch",
        column_config={"run": st.column_config.LinkColumn("run", display_text=r"run\?run=(.*)")},
    )
    st.download_button(
        "Download the table (CSV)",
        table.to_csv(index=False),
        file_name=f"{sweep_id}.csv",
        mime="text/csv",
        icon=":material/download:",
    )


sweep_table()
