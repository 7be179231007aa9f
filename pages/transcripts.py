"""Transcripts: read RL rollouts (and distillation replies) by run and step; GRPO groups side by side with rewards
and advantages."""

import pandas as pd
import streamlit as st

from app import charts, state, transcripts_view as view, widgets

st.title("Transcripts")
st.caption(
    "What the model wrote during RL: every sampled completion, its reward, and its advantage (reward minus "
    "the mean of its group, divided by the group's standard deviation when the run has scale_rewards=group, RL's "
    "default). Distillation runs: the student's replies (on-policy) or the teacher's (prompt "
    "distillation, with the context it saw)."
)
store = state.store()
all_runs = store.list_runs()
widgets.check_address("run", [r["run_id"] for r in all_runs], "run")  # a deleted or mistyped run: say so, and stop
rl_runs = view.rl_runs(all_runs)
if not rl_runs:
    widgets.empty_state(
        "No RL or distillation runs yet: transcripts are recorded by them.", "new_run", "Start an RL run"
    )
    st.stop()

if st.query_params.get("run") not in {None, *(r["run_id"] for r in rl_runs)}:
    st.info(
        f"Run {st.query_params['run']} is not an RL or distillation run: only those record transcripts.",
        icon=":material/info:",
    )
    st.stop()
run_id = widgets.run_picker("Run", rl_runs)
tasks = view.run_tasks(next(r for r in rl_runs if r["run_id"] == run_id))
task = (
    st.selectbox("Task", [view.ALL_TASKS, *tasks], key=f"task-{run_id}", help="The environment of the mix")
    if len(tasks) > 1
    else view.ALL_TASKS
)
steps = store.transcript_steps(run_id)
if not steps:
    st.info(
        "No rollouts recorded yet: they appear when the run's first step finishes.", icon=":material/hourglass_top:"
    )
    st.stop()

c1, c2 = st.columns([3, 2])
step = (
    steps[0]
    if len(steps) == 1
    else c1.select_slider(charts.STEP_AXIS.capitalize(), steps, value=steps[-1], key=f"step-{run_id}")
)
rollouts = view.of_task(store.get_transcripts(run_id, step=step), task)
if rollouts.empty:
    st.info(f"No {task} groups at step {step}: the mix drew none of them there.", icon=":material/filter_alt:")
    st.stop()
low, high = view.reward_bounds(rollouts)
reward_range = (low, high)
if high > low:
    reward_range = c2.slider("Reward between", low, high, (low, high), key=f"reward-{run_id}-{step}")
shown = view.in_reward_range(rollouts, reward_range)

flagged = view.flagged_count(rollouts)
if flagged and st.toggle(
    f"Only samples flagged as possible reward hacks ({flagged})",
    key=f"hacks-{run_id}-{step}",
    help="Code that touches what reward hacks use: sys.modules, __main__, gc, frames, "
    "os._exit, atexit, builtins, json patches, objects that equal everything. The "
    "grader keeps the tests out of reach; the flag shows a policy drifting that way. "
    "Text replies are flagged when they hedge: several candidate answers, the right one among them.",
):
    shown = view.only_flagged(shown)

summary = view.step_summary(rollouts)
c1, c2, c3, c4 = st.columns(4)
c1.metric("Samples at this step", summary.samples, border=True)
c2.metric("Groups", summary.groups, border=True)
c3.metric("Mean reward", "—" if summary.mean_reward is None else widgets.format_value(summary.mean_reward), border=True)
c4.metric(
    "Correct",
    "—" if summary.correct_share is None else f"{summary.correct_share:.0%}",
    border=True,
    help="Share of samples the grader marked correct (reward also counts the format).",
)

unisolated = view.unisolated_count(rollouts)
if unisolated:
    st.warning(
        f"{unisolated} of the {len(rollouts)} samples at this step ran their code in a sandbox that "
        "could not isolate the network: that code could reach the network (see the Home page's code "
        "sandbox status for why).",
        icon=":material/warning:",
    )


def sandbox_output(sandbox: dict) -> None:
    if view.network_exposed(sandbox):
        st.warning(
            "Ran with network access: the sandbox could not isolate the network here.", icon=":material/warning:"
        )
    elif sandbox.get("network_isolated"):
        st.caption("network: isolated")
    if passed := view.tests_passed_text(sandbox):
        st.caption(passed)
    for name in view.SANDBOX_TEXT_KEYS:
        if sandbox.get(name):
            st.caption(name)
            widgets.plain_text(str(sandbox[name]), code=True)
    if failures := view.failures_text(sandbox):
        st.caption("failed tests")
        widgets.plain_text(failures, code=True)


def sample_card(row: pd.Series) -> None:
    with st.container(border=True):
        st.markdown(view.sample_badges(row))
        st.caption(widgets.safe_markdown(view.sample_facts(row)))
        widgets.plain_text(row["completion"] or "", code=True)
        if turns := view.turn_lines(row["metrics"]):
            with st.expander(f"Turns ({sum(who.endswith('model') for who, _ in turns)})", expanded=True):
                for who, text in turns:
                    st.caption(who)
                    widgets.plain_text(text, code=True)
        sandbox, other = view.split_details(row["metrics"])
        if sandbox:
            with st.expander("Sandbox output"):
                sandbox_output(sandbox)
        if other:
            with st.expander("Per-sample metrics"):
                st.json(other)


mode = st.segmented_control(
    "View", ["Groups side by side", "Table"], default="Groups side by side", required=True, key="transcripts-view"
)
if shown.empty:
    st.info("No samples in this reward range.", icon=":material/filter_alt:")
elif mode == "Table":
    st.dataframe(
        shown[view.TABLE_COLUMNS],
        hide_index=True,
        width="stretch",
        column_config={"completion": st.column_config.TextColumn("completion", width="large")},
    )
else:
    pages = view.page_count(list(shown["group_idx"].unique()))
    page = (
        st.number_input(f"Page of groups (1-{pages})", 1, pages, 1, key=f"group-page-{run_id}-{step}")
        if pages > 1
        else 1
    )
    for members in view.groups_on_page(shown, page):
        st.markdown(view.group_heading(members))
        with st.expander("Prompt", expanded=False):
            widgets.plain_text(members.iloc[0]["prompt"] or "", code=True)
        for chunk in view.rows_of(members):
            for column, (_, row) in zip(st.columns(view.SAMPLES_PER_ROW), chunk.iterrows()):
                with column:
                    sample_card(row)

st.subheader("Rewards")
c1, c2 = st.columns(2)
rewards = rollouts["reward"].dropna()
if len(rewards):
    c1.plotly_chart(
        charts.reward_histogram(list(rewards), f"Rewards at step {step}"),
        key="reward-hist",
        config={"displaylogo": False},
    )
all_rows = view.of_task(store.get_transcripts(run_id), task)[["step", "reward"]].dropna()
if len(all_rows):
    c2.plotly_chart(charts.reward_by_step(all_rows), key="reward-steps", config={"displaylogo": False})
