"""Datasets: upload and validate data (row-numbered errors), preview it, see its tokens and what the loss trains on."""

from pathlib import Path

import streamlit as st

from app import charts, data_views, datasets_view as view, forms, state, state_keys, widgets
from cookbook_engine import renderers
from cookbook_engine.config import TRAIN_ON
from cookbook_engine.data import loading as datasets

st.title("Datasets")
widgets.show_notice()
store = state.store()

with st.expander("Upload a dataset", expanded=not store.list_datasets(), icon=":material/upload:"):
    st.caption(
        "JSONL, JSON, CSV or Parquet. Chat data: `messages` (role/content), `conversations`, "
        "`prompt` + `completion` or `instruction` + `output`. Preference data: `chosen` + `rejected` "
        "(+ `prompt`). RL problems: `prompt` + `answer` (+ `grader`)."
    )
    upload = st.file_uploader("Data file", type=["jsonl", "json", "csv", "parquet"], key="dataset-upload")
    c1, c2, c3 = st.columns([2, 1, 1], vertical_alignment="bottom")
    default_name = Path(upload.name).stem if upload else ""
    name = c1.text_input("Name", value=default_name, key=f"dataset-name-{default_name}")
    kind_choice = c2.selectbox(
        "Kind", view.KIND_CHOICES, key="dataset-kind", help="Detected from the columns unless you pick one."
    )
    add = c3.button(
        "Validate and add", type="primary", disabled=upload is None, icon=":material/check:", width="stretch"
    )
    if add and upload is not None:
        if problem := view.name_problem(name, store.list_datasets()):
            widgets.error_text(problem)
        else:
            saved, result, problem = None, None, None
            with st.status(f"Checking every row of {widgets.safe_markdown(upload.name)}…") as status:
                try:
                    saved, result = view.save_and_validate(upload.name, upload.getvalue(), kind_choice)
                    status.update(label=f"{result.num_rows} valid rows", state="complete")
                except datasets.DatasetError as exc:
                    status.update(label="The file has problems", state="error")
                    problem = str(exc)
            if problem:  # outside the status box, which folds away: every bad line, in plain sight
                st.error(
                    widgets.safe_markdown(
                        f"{upload.name} cannot be used yet: fix these rows and upload it "
                        "again (nothing was added; the list below is unchanged)."
                    ),
                    icon=":material/error:",
                )
                widgets.plain_text(problem, code=True)
            if saved is not None and result is not None:
                widgets.notice(widgets.safe_markdown(view.register_upload(store, name, saved, result, upload.name)))
                st.session_state[state_keys.DATASET_BROWSE] = view.upload_key(name.strip())
                st.rerun()

# --- browse ---------------------------------------------------------------------------------------------------
entries = view.browse_entries(datasets.list_builtin(), store.list_datasets())
if st.session_state.get(state_keys.DATASET_BROWSE) not in entries:
    st.session_state[state_keys.DATASET_BROWSE] = next(iter(entries))
st.subheader("Your datasets")
c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
chosen = c1.selectbox(
    "Dataset", list(entries), format_func=lambda key: entries[key].label, key=state_keys.DATASET_BROWSE
)
entry = entries[chosen]
if entry.uploaded and c2.button("Remove from the list", icon=":material/delete:", width="stretch"):
    view.remove_upload(store, entry)
    widgets.notice(widgets.safe_markdown(f"Removed {entry.name}."))
    st.rerun()
st.caption(widgets.safe_markdown(entry.caption))

preview, tokens_tab = st.tabs(["Preview", "Tokens and loss mask"])
with preview:
    try:
        st.dataframe(data_views.preview_frame(entry.spec), hide_index=True, width="stretch")
        st.caption("The first 50 rows, as stored.")
    except datasets.DatasetError as exc:
        widgets.error_text(str(exc))
with tokens_tab:
    if entry.kind != "chat":
        st.info(
            "The token view is for chat (SL) data; preference and RL data are rendered at training time.",
            icon=":material/info:",
        )
        st.stop()
    c1, c2 = st.columns(2)
    renderer_name = c1.selectbox(
        "Renderer", renderers.renderer_names(), key="dataset-renderer", help="auto = the default model's chat template"
    )
    train_on = c2.selectbox(
        "Train on", list(TRAIN_ON), format_func=forms.TRAIN_ON_LABELS.__getitem__, key="dataset-train-on"
    )
    version = data_views.version(entry.spec)
    try:
        with st.spinner("Tokenizing…"):
            state.ensure_default_model()
            stats = data_views.token_stats(entry.spec, version, renderer_name, train_on)
            examples = data_views.chat_examples(entry.spec, version)
    except (datasets.DatasetError, renderers.RendererError) as exc:
        widgets.error_text(str(exc))
        st.stop()
    for column, (label, value) in zip(st.columns(4), view.token_totals(stats)):
        column.metric(label, value, border=True)
    if len(stats) >= data_views.MAX_EXAMPLES_FOR_STATS:
        st.caption(f"Statistics over the first {data_views.MAX_EXAMPLES_FOR_STATS} examples.")
    st.plotly_chart(charts.length_histogram(list(stats["tokens"])), key="length-hist", config={"displaylogo": False})
    index = st.number_input(f"Example (1-{len(examples)})", 1, len(examples), 1, key=f"example-{chosen}") - 1
    renderer = renderers.get_renderer(renderer_name, data_views.tokenizer())
    tokens, weights = renderer.build_supervised_example(examples[index], train_on)
    st.caption(view.mask_caption(tokens, weights))
    st.dataframe(data_views.token_grid(tokens, weights), width="stretch")
    with st.expander("The conversation"):
        for message in examples[index]:
            st.caption(message["role"])
            widgets.plain_text(message["content"], code=True)
