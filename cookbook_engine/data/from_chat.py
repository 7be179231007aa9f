"""Closing the loop from chat to data: a conversation as chat-format JSONL, turns appended to an SL dataset, and
"this reply is better" appended to a DPO dataset.

Rows are written in the formats `loading.py` reads: `{"messages": [...]}` for chat data and
`{"prompt": [...], "chosen": [...], "rejected": [...]}` (message lists) for preference data. Appending goes to a
JSONL file in the uploads folder, a new one or an uploaded JSONL dataset, and the dataset's row count in the store
is updated. Every row is validated with the same loader training uses before anything is written.

Not here: the chat itself (chat.py), the UI that picks turns (pages/chat.py), or other file formats (a CSV or
Parquet upload is refused: append to a new dataset instead).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from cookbook_engine import paths
from cookbook_engine.data import loading as datasets
from storage import RunStore
from storage.input_error import InputError


class ChatDataError(InputError, ValueError):
    """Rows that cannot be appended (a non-JSONL dataset, a dataset of another kind, an invalid row)."""


def to_jsonl(conversations: list[list[dict]]) -> str:
    """Conversations as chat-format JSONL: one `{"messages": [...]}` line each."""
    return "".join(json.dumps({"messages": messages}, ensure_ascii=False) + "\n" for messages in conversations)


def preference_row(prompt: list[dict], chosen: str, rejected: str) -> dict:
    """A DPO pair: the conversation so far, the preferred reply and the other one."""
    return {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
    }


def appendable(store: RunStore, kind: str) -> list[dict]:
    """The uploaded datasets of this kind ("chat" or "preference") that rows can be appended to (JSONL files)."""
    return [
        d
        for d in store.list_datasets()
        if d["kind"] == kind and d["source"] == "upload" and str(d["path"]).endswith(".jsonl")
    ]


def append_rows(store: RunStore, name: str, kind: str, rows: list[dict], *, new: bool = False) -> int:
    """Append rows to the uploaded dataset `name`, or make it (a new JSONL file) if there is none; returns the
    dataset's row count afterwards. With `new`, a dataset of that name already there is refused, never grown."""
    if not rows:
        raise ChatDataError("nothing to add: pick at least one turn")
    name = name.strip()
    if not name:
        raise ChatDataError("give the dataset a name")
    _check_rows(rows, kind)
    existing = next((d for d in store.list_datasets() if d["name"] == name), None)
    if existing is not None and new:
        raise ChatDataError(f"a dataset named {name} exists: pick it under Dataset to add to it, or give a new name")
    if existing is None:
        path = datasets.save_upload(f"{name}.jsonl", _lines(rows).encode())
        meta = {"filename": f"{name}.jsonl (from chat)"}
    else:
        if existing["kind"] != kind:
            raise ChatDataError(f"dataset {name}: it holds {existing['kind']} data, these rows are {kind} data")
        path = Path(existing["path"])
        if existing["source"] != "upload" or path.suffix != ".jsonl":
            raise ChatDataError(f"dataset {name}: only JSONL uploads can grow; add to a new dataset instead")
        with path.open("a", encoding="utf-8") as handle:
            if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                handle.write("\n")
            handle.write(_lines(rows))
        meta = existing.get("meta") or {}
    count = (existing.get("num_rows") or 0) + len(rows) if existing else len(rows)
    store.register_dataset(name, kind=kind, source="upload", path=str(path), num_rows=count, meta=meta)
    return count


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _check_rows(rows: list[dict], kind: str) -> None:
    """Load the rows with training's own loader (raises ChatDataError with the row's problem)."""
    with tempfile.NamedTemporaryFile(
        "w", suffix=".jsonl", dir=paths.uploads_dir(), delete=False, encoding="utf-8"
    ) as handle:
        handle.write(_lines(rows))
    check = Path(handle.name)
    try:
        if kind == "chat":
            datasets.load_chat_dataset(str(check), test_fraction=0.0)
        elif kind == "preference":
            datasets.load_preference_dataset(str(check), test_fraction=0.0)
        else:
            raise ChatDataError(f"kind {kind!r}: chat data can only become chat or preference rows")
    except datasets.DatasetError as exc:
        raise ChatDataError(str(exc).replace(check.name, "the new rows")) from exc
    finally:
        check.unlink(missing_ok=True)
