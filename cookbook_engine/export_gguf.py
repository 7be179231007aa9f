"""Exporting a checkpoint as a GGUF file that llama.cpp-based tools (llama.cpp, Ollama, LM Studio) load: the base
model with the LoRA adapter merged in, written with the `gguf` package's writer as f16 or q8_0.

The model's architecture and tokenizer metadata are copied from the GGUF file the default model ships in (so the
exported file keeps its vocabulary, merges, special tokens and chat template); the weights are the merged model's,
renamed to GGUF's tensor names, with the query and key projections permuted into llama.cpp's rotary layout (the
inverse of what the GGUF loaders undo). Norms stay float32; q8_0 quantizes the matrices in blocks of 32.

Not here: models without a GGUF source for their tokenizer metadata (only the default model has one), or other
quantizations (q4 and friends lose too much on a 135M model to be worth offering).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from cookbook_engine import export, models

QUANTIZATIONS = ("f16", "q8_0")
_SKIPPED_KEYS = ("GGUF.", "general.file_type", "general.quantization_version")


def gguf_export(
    checkpoint_path: str | Path,
    quantization: str = "f16",
    out_dir: str | Path | None = None,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Merge the checkpoint's adapter into its base model and write `<name>-<quantization>.gguf`; returns it."""
    import gguf

    note = progress or (lambda message: None)
    if quantization not in QUANTIZATIONS:
        raise export.ExportError(f"quantization {quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    folder = export.checkpoint_folder(checkpoint_path)
    base_name = export.adapter_config(folder).get("base_model_name_or_path") or ""
    if models.canonical_name(base_name) != models.DEFAULT_MODEL:
        raise export.ExportError(
            f"checkpoint {folder}: GGUF export needs the base model's own GGUF tokenizer data, "
            f"which only {models.DEFAULT_MODEL} has here; export the merged folder instead"
        )
    note("merging the LoRA adapter into the base model")
    merged = merged_state(folder, base_name)
    source = gguf.GGUFReader(models.default_gguf_path())
    stem = export.safe_name(name) if name else export.export_name(folder)
    target = Path(out_dir or export.exports_dir()) / f"{stem}-{quantization}.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    note(f"writing {target.name}")
    writer = gguf.GGUFWriter(str(partial), arch=_field(source, "general.architecture"))
    _copy_metadata(source, writer)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if quantization == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)
    for gguf_name, array in gguf_tensors(merged, source):
        _add_tensor(writer, gguf_name, array, quantization)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(target)
    export.record_source(target, folder)
    return target


def merged_state(folder: Path, base_name: str) -> dict[str, np.ndarray]:
    """The base model with the adapter folded in, as float32 arrays by Hugging Face name."""
    import torch
    from peft import PeftModel

    base = models.load_model(base_name)
    merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    with torch.no_grad():
        return {key: value.detach().float().cpu().numpy() for key, value in merged.state_dict().items()}


def gguf_tensors(state: dict[str, np.ndarray], source) -> list[tuple[str, np.ndarray]]:
    """(GGUF name, array) for every weight, in llama.cpp's layout; a tied lm_head is left out."""
    import gguf

    arch = _field(source, "general.architecture")
    blocks = int(_field(source, f"{arch}.block_count"))
    heads = int(_field(source, f"{arch}.attention.head_count"))
    kv_heads = int(_field(source, f"{arch}.attention.head_count_kv") or heads)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, blocks)
    tied = "output.weight" not in {t.name for t in source.tensors}
    out = []
    for key, array in state.items():
        if key == "lm_head.weight" and tied:
            continue
        gguf_name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise export.ExportError(f"GGUF export: no GGUF name for tensor {key}")
        if key.endswith("q_proj.weight"):
            array = _permute(array, heads)
        elif key.endswith("k_proj.weight"):
            array = _permute(array, kv_heads)
        out.append((gguf_name, array))
    return out


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permute: each head's rotary halves interleaved."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _add_tensor(writer, name: str, array: np.ndarray, quantization: str) -> None:
    import gguf

    if array.ndim == 1:
        writer.add_tensor(name, array.astype(np.float32))
    elif quantization == "f16":
        writer.add_tensor(name, array.astype(np.float16))
    else:
        quantized = gguf.quants.quantize(array.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, quantized, raw_shape=quantized.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def _field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _copy_metadata(source, writer) -> None:
    """Every key/value of the source file but its own bookkeeping and file type (architecture is set already)."""
    import gguf

    for key, field in source.fields.items():
        if key.startswith(_SKIPPED_KEYS) or key == "general.architecture":
            continue
        kind = field.types[0]
        value = field.contents()
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
