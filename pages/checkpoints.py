"""Checkpoints: every run's saved weights; the line to call one from your own tools through `cookbook serve`'s
OpenAI-compatible endpoint; export a LoRA adapter (PEFT), a merged Hugging Face model or a GGUF file (f16, q8_0),
download; the exports made so far with their sizes, each removable after a confirmation."""

from pathlib import Path

import streamlit as st

from app import state, state_keys, widgets
from cookbook_engine import export, export_gguf, paths, serve
from cookbook_engine.serve import openai_api

st.title("Checkpoints")
st.caption(
    "Each checkpoint is a LoRA adapter in PEFT format. Download it as is, or merge it into the base model "
    "for tools that do not know LoRA."
)
widgets.show_notice()
store = state.store()
checkpoints = store.list_checkpoints()
run_ids = {c["run_id"] for c in checkpoints}
all_runs = store.list_runs()
runs = [r for r in all_runs if r["run_id"] in run_ids]


def exports_list() -> None:
    """Every export on disk (merged folders and zips pile up: about 0.5 GB each for the default model)."""
    exports = export.list_exports()
    st.subheader("Exports")
    if not exports:
        st.caption(f"No exports yet. They are saved in {export.exports_dir()}.")
        return
    st.caption(
        f"{len(exports)} in {export.exports_dir()} · {paths.human_size(sum(e['bytes'] for e in exports))} in all"
    )
    for row in exports:
        c1, c2, c3 = st.columns([5, 1.2, 1], vertical_alignment="center")
        c1.text(row["name"])
        c2.caption(paths.human_size(row["bytes"]))
        with c3.popover("Delete", icon=":material/delete:", width="stretch"):  # asks first: it cannot be undone
            st.markdown(widgets.safe_markdown(f"Delete {row['name']}? This cannot be undone."))
            if st.button(
                f"Delete {paths.human_size(row['bytes'])}",
                type="primary",
                icon=":material/delete:",
                key=f"delete-export-{row['name']}",
            ):
                export.delete_export(row["path"])
                widgets.notice(
                    widgets.safe_markdown(f"Deleted the export {row['name']} ({paths.human_size(row['bytes'])} freed).")
                )
                st.rerun()


def built_export(label: str, key: str, build, spinner: str, done: str) -> str | None:
    """A button that builds an export (in a status box that shows its progress) and the path it built, kept for
    this browser session while it exists."""
    built = st.session_state.setdefault(state_keys.BUILT_EXPORTS, {})
    if st.button(label, icon=":material/build:", key=f"build-{key}"):
        with st.status(spinner, expanded=True) as status:
            try:
                built[key] = str(build(status.write))
                status.update(label=done, state="complete", expanded=False)
            except (export.ExportError, OSError) as exc:
                status.update(label="Export failed", state="error")
                widgets.error_text(str(exc))
    return built[key] if key in built and Path(built[key]).exists() else None


widgets.check_address("run", [r["run_id"] for r in all_runs], "run")  # a deleted or mistyped run: say so, and stop
if not runs:
    widgets.empty_state(
        "No checkpoints yet: runs save one every save_every steps and at the end.", "new_run", "Start a new run"
    )
    exports_list()
    st.stop()

if st.query_params.get("run") not in {None, *run_ids}:
    st.info(f"Run {st.query_params['run']} has no checkpoints yet.", icon=":material/hourglass_top:")
    st.stop()
run_id = widgets.run_picker("Run", runs)
run = next(r for r in runs if r["run_id"] == run_id)
mine = [c for c in checkpoints if c["run_id"] == run_id]
st.dataframe(
    [
        {
            "Step": c["step"],
            "Name": c["name"],
            "Kind": c["kind"],
            "Final": bool((c.get("loop_state") or {}).get("final")),
            "Saved": widgets.age(c["created_at"]),
            "Weights (sampler)": c.get("sampler_path") or "",
            "Full state (resume)": c.get("state_path") or "",
        }
        for c in mine
    ],
    hide_index=True,
    width="stretch",
)

by_path = {c.get("sampler_path") or c["state_path"]: c for c in mine}  # every checkpoint has one or both
path = st.selectbox(
    "Checkpoint to export",
    list(by_path),
    format_func=lambda p: (
        f"step {by_path[p]['step']} · {by_path[p]['name']}"
        + (" (final)" if (by_path[p].get("loop_state") or {}).get("final") else "")
    ),
    key=f"checkpoint-{run_id}",
)
checkpoint = by_path[path]
stem = f"{run['name']}-{checkpoint['name']}"

if checkpoint.get("sampler_path") and run["backend"] != "tinker":
    server = serve.status()
    model_id = openai_api.short_id(run_id, checkpoint["name"])
    st.markdown(f"**Call it from your own tools** (OpenAI-compatible; model id `{model_id}`)")
    st.code(
        serve.openai_snippet(server.url or f"http://{serve.HOST}:{serve.DEFAULT_PORT}", model_id), language="python"
    )
    if not server.running:
        st.caption("Start the server first: `cookbook serve` (it answers on 127.0.0.1 only; docs/SERVE.md).")

c1, c2, c3 = st.columns(3, gap="medium")
with c1.container(border=True):
    st.markdown("**LoRA adapter** (PEFT format)")
    st.caption(
        "adapter_model.safetensors + adapter_config.json; load it with `PeftModel.from_pretrained(base_model, folder)`."
    )
    try:
        export.checkpoint_folder(path)
        st.download_button(
            "Download adapter (.zip)",
            data=lambda: export.adapter_zip(path, name=stem).read_bytes(),
            file_name=f"{stem}-lora-adapter.zip",
            mime="application/zip",
            icon=":material/download:",
            key=f"adapter-{path}",
            on_click="ignore",
        )
    except export.ExportError as exc:
        st.warning(widgets.safe_markdown(str(exc)))
with c2.container(border=True):
    st.markdown("**Merged model** (Hugging Face folder)")
    st.caption(
        "The base model with the adapter folded into its weights, plus the tokenizer; load it with "
        "`AutoModelForCausalLM.from_pretrained(folder)`. About 0.5 GB for the default model."
    )
    folder = built_export(
        "Build merged model",
        f"merged-{path}",
        lambda note: export.merged_model(path, name=stem, progress=note),
        "Merging the adapter into the base model…",
        "Merged model saved",
    )
    if folder:
        merged = Path(folder)
        st.success("Saved:", icon=":material/check_circle:")
        st.code(folder, language=None)
        st.download_button(
            "Download merged model (.zip)",
            data=lambda: export.zip_folder(merged).read_bytes(),
            file_name=f"{merged.name}.zip",
            mime="application/zip",
            icon=":material/download:",
            key=f"merged-{path}",
            on_click="ignore",
        )
with c3.container(border=True):
    st.markdown("**GGUF** (llama.cpp, Ollama, LM Studio)")
    st.caption(
        "The merged model in one file: f16 (about 270 MB, same answers) or q8_0 (about 145 MB, close). "
        "Run it with `llama-cli -m FILE`."
    )
    quantization = st.segmented_control(
        "Precision", export_gguf.QUANTIZATIONS, default="q8_0", required=True, key=f"gguf-precision-{path}"
    )
    file = built_export(
        f"Build {quantization} GGUF",
        f"gguf-{quantization}-{path}",
        lambda note: export_gguf.gguf_export(path, quantization, name=stem, progress=note),
        "Merging the adapter and writing the GGUF file…",
        "GGUF file saved",
    )
    if file:
        gguf = Path(file)
        st.code(file, language=None)
        st.download_button(
            "Download the GGUF file",
            data=lambda: gguf.read_bytes(),
            file_name=gguf.name,
            mime="application/octet-stream",
            icon=":material/download:",
            key=f"gguf-{file}",
            on_click="ignore",
        )

exports_list()
