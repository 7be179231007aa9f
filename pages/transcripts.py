"""Transcripts: read RL rollouts by run and step; GRPO groups side by side with rewards and advantages."""

import pandas as pd
import streamlit as st

from app import charts, state, widgets

st.title("Transcripts")
st.caption("What the model wrote during RL: every sampled completion, its reward, and its advantage (reward minus "
           "the mean of its group).")
store = state.store()
rl_runs = [r for r in store.list_runs() if r["kind"] == "rl"]
if not rl_runs:
    widgets.empty_state("No RL runs yet: transcripts are recorded by RL runs.", "new_run", "Start an RL run")
    st.stop()

run_id = widgets.run_picker("Run", rl_runs, key="transcripts-run", default_id=st.query_params.get("run"))
steps = store.transcript_steps(run_id)
if not steps:
    st.info("No rollouts recorded yet: they appear when the run's first step finishes.",
            icon=":material/hourglass_top:")
    st.stop()

c1, c2 = st.columns([3, 2])
step = steps[0] if len(steps) == 1 else c1.select_slider("Step", steps, value=steps[-1], key=f"step-{run_id}")
rollouts = store.get_transcripts(run_id, step=step)
rewards = rollouts["reward"].dropna()
low, high = (float(rewards.min()), float(rewards.max())) if len(rewards) else (0.0, 0.0)
reward_range = (low, high)
if high > low:
    reward_range = c2.slider("Reward between", low, high, (low, high), key=f"reward-{run_id}-{step}")
shown = rollouts[rollouts["reward"].isna() | rollouts["reward"].between(*reward_range)]


def hack_flags(details) -> list[str]:
    """The reward-hacking patterns the grader found in the sample's code (rl/hack_flags.py)."""
    return list(details.get("suspicious") or []) if isinstance(details, dict) else []


flagged = int(sum(bool(hack_flags(m)) for m in rollouts["metrics"]))
if flagged and st.toggle(f"Only samples flagged as possible reward hacks ({flagged})", key=f"hacks-{run_id}-{step}",
                         help="Code that touches what reward hacks use: sys.modules, __main__, gc, frames, "
                              "os._exit, atexit, builtins, json patches, objects that equal everything. The "
                              "grader keeps the tests out of reach; the flag shows a policy drifting that way."):
    shown = shown[[bool(hack_flags(m)) for m in shown["metrics"]]]

c1, c2, c3, c4 = st.columns(4)
c1.metric("Samples at this step", len(rollouts), border=True)
c2.metric("Groups", rollouts["group_idx"].nunique(), border=True)
c3.metric("Mean reward", widgets.format_value(rewards.mean()) if len(rewards) else "—", border=True)
correct = [m.get("correct") for m in rollouts["metrics"] if isinstance(m, dict) and m.get("correct") is not None]
c4.metric("Correct", f"{sum(correct) / len(correct):.0%}" if correct else "—", border=True,
          help="Share of samples the grader marked correct (reward also counts the format).")

def network_exposed(details) -> bool:
    """The sample's code ran in a sandbox that could not isolate the network."""
    return isinstance(details, dict) and "network_isolated" in details and not details["network_isolated"]


unisolated = [m for m in rollouts["metrics"] if network_exposed(m)]
if unisolated:
    st.warning(f"{len(unisolated)} of the {len(rollouts)} samples at this step ran their code in a sandbox that "
               "could not isolate the network: that code could reach the network (see the Home page's code "
               "sandbox status for why).", icon=":material/warning:")

SANDBOX_KEYS = ("tests_passed", "tests_total", "failures", "solution_error", "printed", "stderr", "sandbox_error",
                "error", "network_isolated", "suspicious")


def sample_card(row) -> None:
    with st.container(border=True):
        reward = "—" if pd.isna(row["reward"]) else f"{row['reward']:.3g}"
        advantage = "—" if pd.isna(row["advantage"]) else f"{row['advantage']:+.3g}"
        color = "green" if not pd.isna(row["advantage"]) and row["advantage"] > 0 else (
            "red" if not pd.isna(row["advantage"]) and row["advantage"] < 0 else "gray")
        details = row["metrics"] or {}
        unisolated_badge = " :orange-badge[:material/warning: network not isolated]" \
            if network_exposed(details) else ""
        hack_badge = " :red-badge[:material/flag: possible reward hack]" if hack_flags(details) else ""
        st.markdown(f":blue-badge[reward {reward}] :{color}-badge[advantage {advantage}]{unisolated_badge}{hack_badge}")
        facts = [f"sample {row['sample_idx']}"]
        if hack_flags(details):
            facts.append("code touches: " + ", ".join(hack_flags(details)))
        if row["stop_reason"]:
            facts.append(f"stopped: {row['stop_reason']}")
        if "answer" in details:
            facts.append(f"expected {details['answer']}")
        if "found" in details:
            facts.append(f"found {details['found']}")
        st.caption(widgets.safe_markdown(" · ".join(str(f) for f in facts)))
        widgets.plain_text(row["completion"] or "", code=True)
        sandbox = {k: details[k] for k in SANDBOX_KEYS if k in details}
        other = {k: v for k, v in details.items() if k not in sandbox}
        if sandbox:
            with st.expander("Sandbox output"):
                if network_exposed(sandbox):
                    st.warning("Ran with network access: the sandbox could not isolate the network here.",
                               icon=":material/warning:")
                elif sandbox.get("network_isolated"):
                    st.caption("network: isolated")
                if "tests_total" in sandbox:
                    st.caption(f"tests passed: {int(sandbox.get('tests_passed', 0))}/{int(sandbox['tests_total'])}")
                for name in ("printed", "stderr", "solution_error", "sandbox_error", "error"):
                    if sandbox.get(name):
                        st.caption(name)
                        widgets.plain_text(str(sandbox[name]), code=True)
                if sandbox.get("failures"):
                    st.caption("failed tests")
                    widgets.plain_text("\n".join(f"test {k}: {v}" for k, v in sandbox["failures"].items()), code=True)
        if other:
            with st.expander("Per-sample metrics"):
                st.json(other)


view = st.segmented_control("View", ["Groups side by side", "Table"], default="Groups side by side", required=True,
                            key="transcripts-view")
if shown.empty:
    st.info("No samples in this reward range.", icon=":material/filter_alt:")
elif view == "Table":
    st.dataframe(shown[["group_idx", "sample_idx", "reward", "advantage", "stop_reason", "prompt", "completion"]],
                 hide_index=True, width="stretch",
                 column_config={"completion": st.column_config.TextColumn("completion", width="large")})
else:
    groups = sorted(shown["group_idx"].unique())
    per_page = 5
    pages = max(1, (len(groups) + per_page - 1) // per_page)
    page = st.number_input(f"Page of groups (1-{pages})", 1, pages, 1, key=f"group-page-{run_id}-{step}") \
        if pages > 1 else 1
    for group in groups[(page - 1) * per_page:page * per_page]:
        members = shown[shown["group_idx"] == group].sort_values("sample_idx")
        group_rewards = members["reward"].dropna()
        dropped = bool((members.iloc[0]["metrics"] or {}).get("group_dropped"))
        st.markdown(f"**Group {group}** · {len(members)} samples · mean reward "
                    f"{widgets.format_value(group_rewards.mean()) if len(group_rewards) else '—'}"
                    + (" · not trained on (every sample got the same reward)" if dropped else ""))
        with st.expander("Prompt", expanded=False):
            widgets.plain_text(members.iloc[0]["prompt"] or "", code=True)
        rows = [members.iloc[i:i + 4] for i in range(0, len(members), 4)]
        for chunk in rows:
            for column, (_, row) in zip(st.columns(4), chunk.iterrows()):
                with column:
                    sample_card(row)

st.subheader("Rewards")
c1, c2 = st.columns(2)
if len(rewards):
    c1.plotly_chart(charts.reward_histogram(list(rewards), f"Rewards at step {step}"), key="reward-hist",
                    config={"displaylogo": False})
all_rows = store.get_transcripts(run_id)[["step", "reward"]].dropna()
if len(all_rows):
    c2.plotly_chart(charts.reward_by_step(all_rows), key="reward-steps", config={"displaylogo": False})
