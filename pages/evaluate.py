"""Evaluate: pick models and eval sets, press Evaluate, and read the leaderboard (95% intervals, best marked), a bar
chart with error bars, every model's answer to every example beside the reference, the examples where two
models disagree, and each checkpoint's lineage with buttons that start the next stage (DPO or RL) from it.
Evaluations run in the background and also show up here when started with `cookbook eval`."""

import plotly.graph_objects as go
import streamlit as st

from app import actions, state, state_keys, timing, widgets
from cookbook_engine import lineage
from cookbook_engine.data import loading as datasets
from cookbook_engine.evals import jobs, report, sets, targets
from cookbook_engine.evals.evaluators import EvalSettings
from storage import statuses
from storage.evals import EvalStore

st.title("Evaluate")
st.caption(
    "Score the base model and any checkpoint on the same eval sets. Every number comes with its 95% interval "
    "and the count it rests on, so noise can be told from improvement."
)
store = EvalStore()  # short DuckDB transactions, like the runs list (storage/evals.py)
store.mark_orphans_interrupted()  # an evaluation whose process died (a killed `cookbook eval`) is not left running
manager = jobs.get_eval_manager()


@st.cache_data(show_spinner=False)
def builtin_sets() -> list[dict]:
    return sets.list_builtin()


# ---------------------------------------------------------------------------------------------- the form
model_choices = dict(targets.list_choices(state.store()))
set_choices = {row["name"]: f"{row['name']} · {row['kind']}, {row['examples']} examples" for row in builtin_sets()}
for dataset in state.store().list_datasets():
    set_choices.setdefault(dataset["path"], f"{dataset['name']} · uploaded {dataset['kind']} file")

with st.form("evaluate-form"):
    asked = [m for m in st.query_params.get_all("models") if m in model_choices]  # e.g. a run page's Evaluate link
    chosen_models = st.multiselect(
        "Models",
        list(model_choices),
        default=asked or ["base"],
        format_func=model_choices.__getitem__,
        help="The base model, a run's newest saved weights, any saved step, or the live weights of a run training now.",
    )
    chosen_sets = st.multiselect(
        "Eval sets", list(set_choices), default=["builtin:facts-probes"], format_func=set_choices.__getitem__
    )
    add_retention = st.checkbox(
        "Add the retention check (builtin:retention)",
        key="evaluate-add-retention",
        help="Ordinary questions the base model answers right (capitals, everyday facts, small sums...): did training "
        "keep them? A lower score than the base model's, beyond the intervals, means the run overwrote general "
        "behaviour.",
    )
    upload = st.file_uploader(
        "Or add an eval set file",
        type=["jsonl", "json", "csv", "parquet"],
        help="prompt/answer[/grader]: graded generation · prompt/label: classification · "
        "prompt/chosen/rejected: preference · messages: NLL",
    )
    with st.expander("Descriptions of the built-in eval sets"):
        for row in builtin_sets():
            st.markdown(f"**{row['name']}** ({row['kind']}): {widgets.safe_markdown(row['description'])}")
    c1, c2, c3, c4 = st.columns(4)
    max_examples = c1.number_input("Examples per set (0 = all)", 0, 100_000, 0, step=10)
    samples = c2.number_input(
        "Samples per prompt", 1, 64, 1, help="1 = greedy. More gives pass@k on generation sets (temperature 0.8)."
    )
    max_tokens = c3.number_input("Max reply tokens (0 = the set's own)", 0, 4096, 0, step=16)
    seed = c4.number_input("Seed", 0, 2**31 - 1, 0)
    start = st.form_submit_button("Evaluate", type="primary", icon=":material/play_arrow:")

if start:
    settings = EvalSettings(
        max_tokens=int(max_tokens), samples=int(samples), seed=int(seed), max_examples=int(max_examples)
    )
    try:
        if add_retention and "builtin:retention" not in chosen_sets:
            chosen_sets = chosen_sets + ["builtin:retention"]
        if upload is not None:  # stored in the uploads folder; prepare() below checks every row
            chosen_sets = chosen_sets + [str(datasets.save_upload(upload.name, upload.getvalue()))]
        prepared = jobs.prepare(jobs.EvalRequest(chosen_models, chosen_sets, settings), state.store())
    except (ValueError, FileNotFoundError) as exc:
        widgets.error_text(str(exc))
    else:
        st.query_params["eval"] = manager.start(prepared)

# ---------------------------------------------------------------------------------------------- one evaluation
all_jobs = store.list_jobs()
widgets.check_address("eval", [job["eval_id"] for job in all_jobs], "eval")  # deleted or mistyped: say so, stop
if not all_jobs:
    st.info("No evaluations yet: pick models and eval sets above and press Evaluate.", icon=":material/info:")
    st.stop()
picked = widgets.row_picker(
    "Evaluation",
    all_jobs,
    "eval_id",
    "eval",
    lambda job: f"{job['name']} · {', '.join(job['models'])} on {', '.join(job['eval_sets'])}",  # no status: it changes
)
eval_id = picked["eval_id"]


@widgets.fragment(run_every=2 if picked["status"] in statuses.ACTIVE else None)
def progress_line() -> None:
    job = store.get_job(eval_id)
    if job is None:  # deleted meanwhile
        return
    total = job["total"] or 1
    if job["status"] in statuses.ACTIVE:
        done = manager.examples_done(eval_id)
        done = job["done"] if done is None else done
        st.progress(min(1.0, done / total), text=timing.eval_progress_text(job, done))
        if st.button("Cancel evaluation", icon=":material/stop:"):
            manager.cancel(eval_id)
            st.rerun()
    else:
        widgets.status_badge(job["status"])
        if job.get("error"):
            widgets.error_text(job["error"])
    finished_pairs = len(store.results([eval_id]))
    seen_pairs = st.session_state.setdefault(state_keys.eval_pairs_seen(eval_id), finished_pairs)
    if picked["status"] != job["status"] or finished_pairs != seen_pairs:
        picked.update(job)
        st.session_state[state_keys.eval_pairs_seen(eval_id)] = finished_pairs
        st.rerun()  # the whole page: the leaderboard grows as each model finishes an eval set


progress_line()

# ---------------------------------------------------------------------------------------------- leaderboard
metrics = store.metrics([eval_id])
kinds = {row["eval_set"]: row["kind"] for row in store.results([eval_id])}
if metrics.empty:
    st.caption("No results yet: each model's results appear when it has finished an eval set.")
    st.stop()

st.subheader("Leaderboard")
st.caption(
    "value [95% interval]; ★ marks the best model of a column (lower is better for nll, unparseable and "
    "ties). Accuracy intervals are Wilson's; means, F1 and pass@k use a seeded bootstrap."
)
st.dataframe(report.leaderboard(metrics, kinds), hide_index=True, width="stretch")
long = report.leaderboard_long(metrics, kinds)
st.download_button(
    "Download all metrics (CSV)",
    metrics.drop(columns=["details"]).to_csv(index=False),
    file_name=f"{eval_id}.csv",
    mime="text/csv",
    icon=":material/download:",
)

columns = list(dict.fromkeys(long["eval_set"] + " · " + long["metric"]))
column = st.selectbox("Chart", columns)
shown = long[long["eval_set"] + " · " + long["metric"] == column]
figure = go.Figure(
    go.Bar(
        x=shown["model"],
        y=shown["value"],
        error_y={
            "type": "data",
            "array": (shown["high"] - shown["value"]).tolist(),
            "arrayminus": (shown["value"] - shown["low"]).tolist(),
        },
        text=[f"n={n}" for n in shown["n"]],
    )
)
figure.update_layout(height=320, margin={"l": 10, "r": 10, "t": 30, "b": 10}, title=column)
st.plotly_chart(figure, config={"displaylogo": False})

# ---------------------------------------------------------------------------------------------- examples
st.subheader("Answers")
eval_set = st.selectbox("Eval set", list(kinds), key="answers-set")
examples = store.examples(eval_id, eval_set)
models_here = list(dict.fromkeys(examples["model"]))
compare = len(models_here) >= 2 and st.toggle("Only examples where two models disagree", key="answers-disagree")
if compare:
    c1, c2 = st.columns(2)
    model_a = c1.selectbox("Model A", models_here, index=0)
    model_b = c2.selectbox("Model B", models_here, index=1)
    table = report.disagreements(examples, model_a, model_b)
    st.caption(f"{len(table)} of {examples['idx'].nunique()} examples differ between {model_a} and {model_b}.")
else:
    table = report.answers_side_by_side(examples)
st.dataframe(table, hide_index=True, width="stretch", column_config=widgets.answer_columns(table))

# ---------------------------------------------------------------------------------------------- lineage
results = [row for row in store.results([eval_id]) if row.get("run_id")]
if results:
    st.subheader("Lineage")
    st.caption("Where each checkpoint's weights came from, and the next stage started from it.")
    states = {c["sampler_path"]: c.get("state_path") for c in state.store().list_checkpoints() if c.get("sampler_path")}
for row in results:
    run = state.store().get_run(row["run_id"])
    if run is None:
        continue
    c1, *buttons = st.columns([4] + [1.3] * len(lineage.NEXT_KINDS), vertical_alignment="center")
    chain = lineage.describe(lineage.chain(run["run_id"], state.store()), run["base_model"])
    c1.markdown(f"**{widgets.safe_markdown(row['model'])}**: {widgets.safe_markdown(chain)}")
    state_path = states.get(row["model_path"])
    for column, kind in zip(buttons, lineage.NEXT_KINDS):
        pressed = column.button(
            "Start distilling" if kind == "distill" else f"Start {kind.upper()}",
            icon=":material/arrow_forward:",
            key=f"next-{kind}-{row['model']}",
            disabled=not state_path,
            width="stretch",
            help=f"A {'distillation' if kind == 'distill' else kind.upper()} run starting from this checkpoint"
            if state_path
            else "no saved state at this step",
        )
        if pressed and state_path:
            actions.open_new_run(kind, lineage.next_stage(kind, run, state_path), run["name"])
