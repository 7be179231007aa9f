"""Exporting a checkpoint for use outside the studio: the LoRA adapter as a PEFT zip, or a merged Hugging Face model.

A local checkpoint folder is already a PEFT adapter (adapter_model.safetensors + adapter_config.json), so the
adapter export zips those files: `PeftModel.from_pretrained(base, unzipped_folder)` loads it. The merged export
loads the base model, applies the adapter with peft, folds it into the weights (`merge_and_unload`) and saves a
plain model folder with its tokenizer (`AutoModelForCausalLM.from_pretrained(folder)` loads it, no peft needed).
Exports go under the studio home's `exports/` folder. Not here: hosted (tinker://) checkpoints, which the Tinker
service exports itself, and any UI.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

from cookbook_engine import models, paths
from storage.input_error import InputError

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
SOURCE_SUFFIX = ".source.json"  # beside each export: which checkpoint it came from (so deleting a run finds it)


class ExportError(InputError, ValueError):
    """A checkpoint that cannot be exported; the message names it and says why."""


def exports_dir() -> Path:
    folder = paths.home() / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def checkpoint_folder(checkpoint_path: str | Path) -> Path:
    """The checkpoint's folder, checked to hold a PEFT adapter."""
    text = str(checkpoint_path)
    if "://" in text:
        raise ExportError(f"checkpoint {text}: a hosted checkpoint; download it with the Tinker service's own tools")
    folder = Path(text).expanduser()
    if not folder.is_dir():
        raise ExportError(f"checkpoint {folder}: folder not found (was its run deleted?)")
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise ExportError(f"checkpoint {folder}: not a LoRA adapter folder (missing {', '.join(missing)})")
    return folder


def export_name(checkpoint_path: str | Path) -> str:
    """A readable file name stem: the training client's id and the checkpoint name (…/ID/KIND/NAME)."""
    folder = Path(str(checkpoint_path))
    parts = [folder.parent.parent.name, folder.name] if folder.parent.parent.name else [folder.name]
    return "-".join(p for p in parts if p) or "checkpoint"


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._") or "checkpoint"


def adapter_config(checkpoint_path: str | Path) -> dict:
    return json.loads((checkpoint_folder(checkpoint_path) / "adapter_config.json").read_text())


def adapter_zip(checkpoint_path: str | Path, out_dir: str | Path | None = None, name: str | None = None) -> Path:
    """Zip the checkpoint's PEFT adapter files (flat, at the zip's top level). Returns the zip's path."""
    folder = checkpoint_folder(checkpoint_path)
    target = Path(out_dir or exports_dir()) / f"{safe_name(name) if name else export_name(folder)}-lora-adapter.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in ADAPTER_FILES:
            archive.write(folder / name, arcname=name)
    os.replace(partial, target)
    record_source(target, folder)
    return target


def merged_model(
    checkpoint_path: str | Path,
    out_dir: str | Path | None = None,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Save the base model with the adapter merged into its weights, plus the tokenizer. Returns the folder."""
    from peft import PeftModel

    note = progress or (lambda message: None)
    folder = checkpoint_folder(checkpoint_path)
    base_name = adapter_config(folder).get("base_model_name_or_path")
    if not base_name:
        raise ExportError(f"checkpoint {folder}: adapter_config.json does not name its base model")
    target = Path(out_dir or exports_dir()) / f"{safe_name(name) if name else export_name(folder)}-merged"
    note(f"loading the base model {base_name}")
    try:
        base = models.load_model(base_name)
        tokenizer = models.load_tokenizer(base_name)
    except models.ModelError as exc:
        raise ExportError(f"checkpoint {folder}: its base model cannot be loaded here: {exc}") from exc
    note("applying and merging the LoRA adapter")
    merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    note(f"saving the merged model to {target}")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    record_source(target, folder)
    return target


def zip_folder(folder: str | Path, zip_path: str | Path | None = None) -> Path:
    """Zip a folder's files (weights are stored uncompressed: they do not compress and it is much faster)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"{folder}: folder not found")
    target = Path(zip_path) if zip_path else folder.with_name(folder.name + ".zip")
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                heavy = path.suffix in (".safetensors", ".bin", ".pt")
                archive.write(
                    path,
                    arcname=str(path.relative_to(folder)),
                    compress_type=zipfile.ZIP_STORED if heavy else zipfile.ZIP_DEFLATED,
                )
    os.replace(partial, target)
    source = source_of(folder)
    if source:
        record_source(target, source)
    return target


# ---------------------------------------------------------------------------------------------- the exports folder


def record_source(export: Path, checkpoint: str | Path) -> None:
    export.with_name(export.name + SOURCE_SUFFIX).write_text(json.dumps({"checkpoint": str(checkpoint)}) + "\n")


def source_of(export: str | Path) -> str | None:
    """The checkpoint folder an export was made from (None for exports made before this was recorded)."""
    record = Path(export).with_name(Path(export).name + SOURCE_SUFFIX)
    try:
        return json.loads(record.read_text()).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return None


def list_exports() -> list[dict]:
    """Every finished export (folder or zip) in the exports folder, newest first: path, name, bytes, checkpoint."""
    rows = []
    for path in exports_dir().iterdir():
        if path.name.endswith((SOURCE_SUFFIX, ".partial")):
            continue
        rows.append(
            {
                "path": path,
                "name": path.name,
                "bytes": paths.size_of(path),
                "checkpoint": source_of(path),
                "modified": path.stat().st_mtime,
            }
        )
    return sorted(rows, key=lambda row: -row["modified"])


def exports_of(checkpoint_paths: set[str]) -> list[dict]:
    """The exports made from any of these checkpoint folders."""
    wanted = {str(Path(p)) for p in checkpoint_paths if p}
    return [row for row in list_exports() if row["checkpoint"] and str(Path(row["checkpoint"])) in wanted]


def delete_export(path: str | Path) -> None:
    """Remove an export (folder or zip) and its source record; only inside the exports folder."""
    path = Path(path)
    if path.resolve().parent != exports_dir().resolve():
        raise ExportError(f"{path}: not in the exports folder {exports_dir()}")
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.with_name(path.name + SOURCE_SUFFIX).unlink(missing_ok=True)
