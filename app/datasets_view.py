"""What the Datasets page does besides drawing: the list of datasets to browse (built-in and uploaded), the checks
on a new upload's name, saving and validating an upload (and removing it), and the token statistics' headline
numbers. Plain functions over plain data; the page (pages/datasets.py) lays them out as widgets.

Not here: tokenizing and previews (app/data_views.py, cached per file version), reading files (cookbook_engine.
datasets), drawing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from app import data_views
from cookbook_engine.data import loading as datasets
from storage import RunStore

KIND_CHOICES = ["detect", "chat", "preference", "rl"]


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset in the browse list. `spec` is what the loaders take (builtin:NAME or the stored file's path);
    `name` is set for uploads only (the name they are registered under)."""

    label: str
    spec: str
    kind: str
    rows: int | None
    about: str
    name: str | None = None

    @property
    def uploaded(self) -> bool:
        return self.name is not None

    @property
    def caption(self) -> str:
        return f"{self.rows} rows · {self.kind} data · {self.about}"


def browse_entries(builtin: Sequence[dict[str, Any]], uploaded: Sequence[dict[str, Any]]) -> dict[str, DatasetEntry]:
    """Browse keys ('builtin:NAME', 'upload:NAME') to entries: the built-ins first, then the uploads."""
    entries = {
        f"builtin:{d['name']}": DatasetEntry(
            label=f"{d['name']} · built-in {d['kind']}",
            spec=f"builtin:{d['name']}",
            kind=d["kind"],
            rows=d["num_rows"],
            about=d["description"],
        )
        for d in builtin
    }
    for d in uploaded:
        entries[upload_key(d["name"])] = DatasetEntry(
            label=f"{d['name']} · uploaded {d['kind']}",
            spec=d["path"],
            kind=d["kind"],
            rows=d["num_rows"],
            about=f"from {(d.get('meta') or {}).get('filename', d['path'])}",
            name=d["name"],
        )
    return entries


def upload_key(name: str) -> str:
    """The browse key of an uploaded dataset (the page selects a new upload by it)."""
    return f"upload:{name}"


def name_problem(name: str, uploaded: Sequence[dict[str, Any]]) -> str | None:
    """Why a new upload cannot take this name (empty, or taken), or None when it can."""
    if not name.strip():
        return "Give the dataset a name."
    if any(d["name"] == name.strip() for d in uploaded):
        return f"A dataset named {name.strip()!r} exists already; pick another name or delete it first."
    return None


def save_and_validate(filename: str, data: bytes, kind_choice: str) -> tuple[Path, data_views.Validated]:
    """Store the uploaded bytes and load every row the way training will; on a problem the stored file is
    removed again and DatasetError (row-numbered problems) is raised."""
    saved = datasets.save_upload(filename, data)
    try:
        return saved, data_views.validate(str(saved), None if kind_choice == "detect" else kind_choice)
    except datasets.DatasetError:
        saved.unlink(missing_ok=True)
        raise


def register_upload(store: RunStore, name: str, saved: Path, result: data_views.Validated, filename: str) -> str:
    """Add a validated upload to the list; returns the notice that says so."""
    store.register_dataset(
        name.strip(),
        kind=result.kind,
        source="upload",
        path=str(saved),
        num_rows=result.num_rows,
        meta={"filename": filename},
    )
    return f"Added {name.strip()}: {result.num_rows} {result.kind} rows ({result.detail})."


def remove_upload(store: RunStore, entry: DatasetEntry) -> None:
    """Take an uploaded dataset off the list and delete its stored file."""
    if entry.name is None:
        raise ValueError(f"{entry.label} is built in: only uploads can be removed")
    store.delete_dataset(entry.name)
    Path(entry.spec).unlink(missing_ok=True)


def token_totals(stats_df: pd.DataFrame) -> list[tuple[str, str | int]]:
    """The four headline numbers of the token statistics (per example: tokens, trained)."""
    return [
        ("Examples", len(stats_df)),
        ("Total tokens", f"{int(stats_df['tokens'].sum()):,}"),
        ("Trained tokens", f"{int(stats_df['trained'].sum()):,}"),
        ("Longest example", f"{int(stats_df['tokens'].max()):,}"),
    ]


def mask_caption(tokens: Sequence[int], weights: Sequence[float]) -> str:
    return f"{len(tokens)} tokens, {sum(1 for w in weights if w > 0)} trained (green). · is a space, ↵ a newline."
