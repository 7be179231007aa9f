"""Loading and validating training data: chat conversations (SL), preference pairs (DPO), prompt/answer problems (RL).

A dataset is named by a spec string:
- `builtin:NAME` (or just NAME): one of the studio's generated datasets (see `builtin_data`);
- a path to a .jsonl, .json, .csv or .parquet file;
- `hf:owner/name[:split]`, or a bare `owner/name` that is not a path: a Hugging Face hub dataset, loaded only when
  the hub answers a 3-second probe (otherwise a DatasetError says it is unreachable, instead of a long hang).

Every row is validated before any training starts. Problems are collected (the first five are shown) into one
DatasetError whose message starts with the file name and gives, for each problem, where it is as a person sees it
(JSONL and JSON: the line in an editor; CSV: the line, the header being line 1; Parquet and hub: the row index) and
what is wrong.

JSON and JSONL files are parsed here, line by line, and those parsed rows are the data: the `datasets` JSON reader
(arrow) rejects valid files whose columns mix types (an answer 12 in one row and "12" in the next) with a message
that names no line. CSV, Parquet and hub datasets go through `datasets.load_dataset`, with a pre-scan of CSV text
for encoding, field counts and line numbers.

This module does not tokenize or render conversations (see `renderers`) and does not grade answers (see `rl`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

from cookbook_engine import paths
from cookbook_engine.data.builtin import BUILTIN, builtin_rows
from storage.input_error import InputError

ROLES = ("system", "user", "assistant", "tool")
FILE_TYPES = (".jsonl", ".json", ".csv", ".parquet")
MAX_LINE_BYTES = 1_000_000
MAX_SHOWN_PROBLEMS = 5
HUB_PROBE_TIMEOUT_S = 3.0
# The held-out share and the seed SL and DPO split their data with unless set (config.py's defaults are these).
DEFAULT_TEST_FRACTION = 0.1
DEFAULT_SEED = 0

# ShareGPT's `from` values, mapped to roles.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
}

CHAT_COLUMNS_EXPECTED = "messages | conversations | prompt + completion (+ system) | instruction + output (+ input)"
PREFERENCE_COLUMNS_EXPECTED = "chosen + rejected (+ prompt)"
RL_COLUMNS_EXPECTED = "prompt (or question) + answer (+ grader)"


class DatasetError(InputError, ValueError):
    """Data that cannot be used. str() starts with the file (or dataset) name, then where and what is wrong."""


@dataclass
class ChatDataset:
    name: str
    train: list[list[dict]]
    test: list[list[dict]]


@dataclass
class PreferencePair:
    prompt: list[dict]  # the shared conversation so far
    chosen: list[dict]  # the preferred continuation (ends with an assistant message)
    rejected: list[dict]  # the dispreferred continuation (ends with an assistant message)


@dataclass
class RLProblem:
    prompt: str
    answer: str
    grader: str
    tolerance: float | None = None  # numeric grader, float answers: the row's relative tolerance (default 1e-6)


# ----------------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------------


def load_chat_dataset(
    spec: str,
    *,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    test_spec: str | None = None,
    seed: int = DEFAULT_SEED,
    max_examples: int | None = None,
) -> ChatDataset:
    """Conversations for SL, split into train and held-out test (or test from `test_spec`)."""
    source = _read_source(spec)
    examples = _convert_rows(source, _chat_converter(source))
    if test_spec:
        test_source = _read_source(test_spec)
        train = _shuffled(examples, seed)[:max_examples]
        return ChatDataset(source.name, train, _convert_rows(test_source, _chat_converter(test_source)))
    train, test = _split(examples, test_fraction, seed, max_examples)
    return ChatDataset(source.name, train, test)


def load_preference_dataset(
    spec: str,
    *,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    seed: int = DEFAULT_SEED,
    max_examples: int | None = None,
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, test) preference pairs for DPO."""
    source = _read_source(spec)
    _require_columns(source, "preference", _is_preference(source.columns), PREFERENCE_COLUMNS_EXPECTED)
    pairs = _convert_rows(source, _pair_from_row)
    return _split(pairs, test_fraction, seed, max_examples)


def load_rl_problems(
    spec: str, *, grader: str = "exact", test_fraction: float = 0.2, seed: int = 0
) -> tuple[list[RLProblem], list[RLProblem]]:
    """(train, test) prompt/answer problems; a row's own `grader` wins over the `grader` argument."""
    source = _read_source(spec)
    _require_columns(source, "rl", _is_rl(source.columns), RL_COLUMNS_EXPECTED)
    problems = _convert_rows(source, lambda row: _problem_from_row(row, grader))
    return _split(problems, test_fraction, seed, None)


def detect_kind(spec: str) -> str:
    """'chat', 'preference' or 'rl', judged from the columns (for the upload page)."""
    name = _builtin_name(spec)
    if name:
        return BUILTIN[name].kind
    source = _read_source(spec)
    kind = _kind_of_columns(source.columns)
    if kind is None:
        if source.problems is not None:
            source.problems.raise_if_any()
        raise DatasetError(
            f"{source.name}: cannot tell what kind of data this is from its columns {_column_list(source.columns)}; "
            f"expected chat ({CHAT_COLUMNS_EXPECTED}), preference ({PREFERENCE_COLUMNS_EXPECTED}) "
            f"or rl ({RL_COLUMNS_EXPECTED})"
        )
    return kind


def list_builtin() -> list[dict]:
    return [
        {"name": d.name, "kind": d.kind, "description": d.description, "num_rows": len(d.make_rows())}
        for d in BUILTIN.values()
    ]


def preview(spec: str, n: int = 20) -> list[dict]:
    """The first n raw rows, as stored (for display); a file with unreadable lines raises them."""
    source = _read_source(spec)
    if source.problems is not None:
        source.problems.raise_if_any()
    return source.rows[:n]


def save_upload(filename: str, data: bytes) -> Path:
    """Store uploaded bytes in the uploads folder under a sanitised name; returns the stored path."""
    stored_name = _safe_upload_name(filename)
    if not data:
        raise DatasetError(f"{filename}: the file is empty (0 bytes)")
    folder = paths.uploads_dir().resolve()
    stem, extension = os.path.splitext(stored_name)
    for attempt in range(10_000):
        candidate = folder / (stored_name if attempt == 0 else f"{stem}-{attempt}{extension}")
        if candidate.resolve().parent != folder:
            raise DatasetError(f"{filename}: refused, the stored path would leave the uploads folder")
        try:
            with open(candidate, "xb") as file:
                file.write(data)
        except FileExistsError:
            continue
        return candidate
    raise DatasetError(f"{filename}: too many uploads with this name; rename the file")


# ----------------------------------------------------------------------------------------------------------------
# Sources: spec -> rows, each with a location label
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class _Source:
    name: str  # first word of every error message: the file name, builtin:NAME or owner/name
    rows: list[dict]
    where: list[str]  # per row, how a person finds it: "line 3", "row index 2"
    columns: list[str]
    problems: _Problems | None = None  # lines that could not be read (bad JSON): reported with the rows' problems


def _read_source(spec: str) -> _Source:
    spec = spec.strip()
    if not spec:
        raise DatasetError("no dataset given: name a file, builtin:NAME or hf:owner/name")
    name = _builtin_name(spec)
    if name:
        rows = builtin_rows(name)
        return _source(f"builtin:{name}", rows, [f"row {i}" for i in range(1, len(rows) + 1)])
    if spec.startswith("builtin:"):
        raise DatasetError(f"{spec}: no such built-in dataset; the built-ins are {', '.join(BUILTIN)}")
    if spec.startswith("hf:"):
        hub_name, _, split = spec[3:].partition(":")
        return _read_hub(hub_name, split or "train")
    path = Path(spec).expanduser()
    if path.is_dir():
        raise DatasetError(f"{spec}: is a folder; give a data file ({', '.join(FILE_TYPES)})")
    if path.is_file():
        return _read_file(path)
    if path.suffix.lower() in FILE_TYPES:
        raise DatasetError(f"{spec}: file not found")
    hub_name, _, split = spec.partition(":")
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", hub_name):
        return _read_hub(hub_name, split or "train")
    raise DatasetError(
        f"{spec}: not found; give a data file ({', '.join(FILE_TYPES)}), builtin:NAME "
        f"(one of {', '.join(BUILTIN)}) or hf:owner/name"
    )


def _builtin_name(spec: str) -> str | None:
    spec = spec.strip()
    name = spec.removeprefix("builtin:")
    if name in BUILTIN and (spec.startswith("builtin:") or not Path(spec).exists()):
        return name
    return None


def _source(name: str, rows: list[dict], where: list[str], columns: list[str] | None = None) -> _Source:
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    return _Source(name, rows, where, columns)


def _read_file(path: Path) -> _Source:
    readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise DatasetError(
            f"{path.name}: unsupported file type '{path.suffix or '(none)'}'; use {', '.join(FILE_TYPES)}"
        )
    return reader(path)


def _read_jsonl(path: Path) -> _Source:
    data = path.read_bytes()
    _check_text_bytes(path.name, data)
    problems = _Problems(path.name)
    rows: list[dict] = []
    where: list[str] = []
    for line_number, raw_line in enumerate(data.split(b"\n"), start=1):
        location = f"line {line_number}"
        if len(raw_line) > MAX_LINE_BYTES:
            problems.add(location, f"the line is {len(raw_line) / 1e6:.1f} MB long; lines over 1 MB are refused")
            continue
        try:
            text = raw_line.decode("utf-8")
        except UnicodeDecodeError as error:
            problems.add(location, f"not valid UTF-8 ({_bad_byte(raw_line, error)}); save the file as UTF-8")
            continue
        if line_number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue  # blank lines carry no row; line numbers stay those of the file
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            problems.add(location, f"invalid JSON: {error.msg} (column {error.colno})")
            continue
        if not isinstance(value, dict):
            problems.add(location, f"expected a JSON object {{...}} per line, found {_describe(value)}")
            continue
        rows.append(value)
        where.append(location)
    if not rows:
        problems.raise_if_any()
        raise DatasetError(f"{path.name}: no data rows")
    source = _source(path.name, rows, where)
    source.problems = problems  # reported together with the other rows' problems, in line order (_convert_rows)
    return source


def _read_json(path: Path) -> _Source:
    data = path.read_bytes()
    _check_text_bytes(path.name, data)
    text = _decode_utf8(path.name, data)
    start = len(text) - len(text.lstrip())
    if not text.startswith("[", start):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            if error.msg == "Extra data":  # several JSON values: JSON Lines under a .json name
                return _read_jsonl(path)
            raise DatasetError(
                f"{path.name}: line {error.lineno}: invalid JSON: {error.msg} (column {error.colno})"
            ) from error
        raise DatasetError(
            f"{path.name}: the top level is {_describe(value)}; expected a list of rows [{{...}}, {{...}}] "
            f"(or JSON Lines: one object per line){_rows_hint(value)}"
        )
    return _read_json_array(path.name, text, start + 1)


def _read_json_array(name: str, text: str, position: int) -> _Source:
    """Parses `[item, item, ...]` item by item so that every row knows its line."""
    decoder = json.JSONDecoder()
    problems = _Problems(name)
    rows: list[dict] = []
    where: list[str] = []
    line, counted_to = 1, 0
    position = _skip_whitespace(text, position)
    item_number = 0
    while position < len(text) and text[position] != "]":
        item_number += 1
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:  # report it, then go on at the next line that starts an object
            problems.add(f"line {error.lineno}", f"invalid JSON: {error.msg} (column {error.colno})")
            following = re.compile(r"\n\s*\{").search(text, error.pos)
            if following is None:
                problems.raise_all()
            position = following.end() - 1
            continue
        line += text.count("\n", counted_to, position)
        counted_to = position
        location = f"item {item_number} (line {line})"
        if isinstance(value, dict):
            rows.append(value)
            where.append(location)
        else:
            problems.add(location, f"expected a JSON object {{...}}, found {_describe(value)}")
        position = _skip_whitespace(text, end)
        if position < len(text) and text[position] == ",":
            position = _skip_whitespace(text, position + 1)
        elif position >= len(text) or text[position] != "]":
            line_here = text.count("\n", 0, position) + 1
            raise DatasetError(f"{name}: line {line_here}: invalid JSON: expected ',' or ']' after item {item_number}")
    if position >= len(text):
        raise DatasetError(f"{name}: invalid JSON: the list is never closed with ']'")
    if text[position + 1 :].strip():
        line_here = text.count("\n", 0, position + 1) + 1
        raise DatasetError(f"{name}: line {line_here}: invalid JSON: extra data after the closing ']'")
    problems.raise_if_any()
    if not rows:
        raise DatasetError(f"{name}: the list is empty: no data rows")
    return _source(name, rows, where)


def _read_csv(path: Path) -> _Source:
    data = path.read_bytes()
    _check_text_bytes(path.name, data)
    text = _decode_utf8(path.name, data)
    header, record_lines = _scan_csv(path.name, text)
    import datasets

    features = datasets.Features({column: datasets.Value("string") for column in header})  # text stays text
    table = _load_with_datasets(path.name, "csv", path, features=features, keep_default_na=False, encoding="utf-8-sig")
    rows = [{column.strip(): value for column, value in row.items()} for row in table.to_list()]
    if len(record_lines) != len(rows):  # the two parsers disagree on some record: fall back to plain counting
        record_lines = list(range(2, len(rows) + 2))
    columns = [column.strip() for column in header]  # "prompt, completion" means prompt and completion
    return _source(path.name, rows, [f"line {line}" for line in record_lines], columns=columns)


def _scan_csv(name: str, text: str) -> tuple[list[str], list[int]]:
    """The header and the line where each data record starts; refuses ragged rows and duplicate columns."""
    problems = _Problems(name)
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    record_lines: list[int] = []
    previous_end = 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record:
                continue
            if header is None:
                header = record
                continue
            record_lines.append(start)
            if len(record) != len(header):
                problems.add(f"line {start}", f"{len(record)} fields, but the header has {len(header)}")
    except csv.Error as error:
        raise DatasetError(f"{name}: line {reader.line_num}: cannot parse the CSV: {error}") from error
    problems.raise_if_any()
    if header is None:
        raise DatasetError(f"{name}: no header line")
    names = [column.strip() for column in header]
    duplicates = sorted({column for column in names if names.count(column) > 1})
    if duplicates:
        raise DatasetError(f"{name}: line 1: duplicate column names {', '.join(duplicates)}")
    if not record_lines:
        raise DatasetError(f"{name}: no data rows, only the header ({', '.join(header)})")
    return header, record_lines


def _read_parquet(path: Path) -> _Source:
    with open(path, "rb") as file:
        head = file.read(4)
    if not head:
        raise DatasetError(f"{path.name}: the file is empty (0 bytes)")
    if head != b"PAR1":
        raise DatasetError(f"{path.name}: not a Parquet file (it does not start with the PAR1 marker)")
    table = _load_with_datasets(path.name, "parquet", path)
    rows = table.to_list()
    if not rows:
        raise DatasetError(f"{path.name}: no data rows")
    return _source(path.name, rows, [f"row index {i}" for i in range(len(rows))], columns=list(table.column_names))


def _load_with_datasets(name: str, builder: str, path: Path, **options: Any):
    import datasets

    datasets.disable_progress_bars()
    # A throwaway cache: the rows are copied into memory, nothing accumulates under the studio home or ~/.cache.
    with tempfile.TemporaryDirectory(prefix="cookbook-datasets-") as cache_dir:
        try:
            return datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache_dir, keep_in_memory=True, **options
            )
        except Exception as error:  # pandas/arrow parse errors come in many types; all mean "unreadable file"
            raise DatasetError(f"{name}: cannot read the {builder} file: {error}") from error


def _read_hub(name: str, split: str) -> _Source:
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", name):
        raise DatasetError(f"hf:{name}: not a hub dataset name; expected hf:owner/name or hf:owner/name:split")
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes", "on")
    host = _hub_host()
    if not offline and not _reachable(host, HUB_PROBE_TIMEOUT_S):
        raise DatasetError(
            f"{name}: the Hugging Face hub ({host[0]}) is unreachable from this machine, so the dataset cannot be "
            f"downloaded; save it as a .jsonl, .json, .csv or .parquet file and upload that instead"
        )
    import datasets

    datasets.disable_progress_bars()
    try:
        table = datasets.load_dataset(name, split=split)
    except Exception as error:  # hub, network and format errors come in many types
        reason = "it is not in the local cache and hub access is off (HF_HUB_OFFLINE)" if offline else str(error)
        raise DatasetError(f"{name}: cannot load split '{split}' from the Hugging Face hub: {reason}") from error
    rows = table.to_list()
    if not rows:
        raise DatasetError(f"{name}: split '{split}' has no rows")
    return _source(name, rows, [f"row index {i}" for i in range(len(rows))], columns=list(table.column_names))


def _hub_host() -> tuple[str, int]:
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)


def _reachable(host: tuple[str, int], timeout_s: float) -> bool:
    """A TCP connect in a daemon thread, so that a slow DNS lookup cannot block past the timeout either."""
    answered: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(host, timeout=timeout_s):
                answered.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered)


# ----------------------------------------------------------------------------------------------------------------
# Raw bytes and text checks
# ----------------------------------------------------------------------------------------------------------------


def _check_text_bytes(name: str, data: bytes) -> None:
    if not data:
        raise DatasetError(f"{name}: the file is empty (0 bytes)")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DatasetError(f"{name}: the file is UTF-16 text; save it as UTF-8")
    for magic, what in ((b"PAR1", "a Parquet file"), (b"\x1f\x8b", "a gzip archive"), (b"PK\x03\x04", "a zip archive")):
        if data.startswith(magic):
            raise DatasetError(f"{name}: this is {what}, not text; give it the right extension or unpack it")
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise DatasetError(f"{name}: line {line}: binary content (a NUL byte at byte {nul}); this is not a text file")
    if not data.strip():
        raise DatasetError(f"{name}: the file contains only whitespace: no data rows")


def _decode_utf8(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        detail = _bad_byte(data[line_start:], error, offset=line_start)
        raise DatasetError(f"{name}: line {line}: not valid UTF-8 ({detail}); save the file as UTF-8") from error


def _bad_byte(line: bytes, error: UnicodeDecodeError, offset: int = 0) -> str:
    index = error.start - offset
    return f"byte 0x{line[index]:02x} at column {index + 1}"


def _skip_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


# ----------------------------------------------------------------------------------------------------------------
# Rows -> examples, with problems collected
# ----------------------------------------------------------------------------------------------------------------


class _RowError(Exception):
    """What is wrong with one row; the caller adds where."""


class _Problems:
    """The problems found in a file, listed in the file's order (the first MAX_SHOWN_PROBLEMS of them)."""

    def __init__(self, name: str):
        self.name = name
        self.found: list[tuple[int, str]] = []  # (line or row number, "line 3: message")
        self.count = 0

    def add(self, where: str, message: str) -> None:
        self.count += 1
        number = re.search(r"\d+", where)
        self.found.append((int(number.group()) if number else 0, f"{where}: {message}"))

    @property
    def shown(self) -> list[str]:
        return [text for _, text in sorted(self.found, key=lambda found: found[0])[:MAX_SHOWN_PROBLEMS]]

    def raise_if_any(self) -> None:
        if self.count:
            self.raise_all()

    def raise_all(self) -> NoReturn:
        """Raise the problems found so far (at least one)."""
        if self.count == 1:
            raise DatasetError(f"{self.name}: {self.shown[0]}")
        more = f", the first {len(self.shown)} shown" if self.count > len(self.shown) else ""
        listing = "\n".join(f"  {message}" for message in self.shown)
        raise DatasetError(f"{self.name}: {self.count} problems{more}:\n{listing}")


def _convert_rows(source: _Source, convert: Callable[[dict], Any]) -> list:
    problems = source.problems or _Problems(source.name)
    examples = []
    for row, where in zip(source.rows, source.where):
        try:
            examples.append(convert(row))
        except _RowError as error:
            problems.add(where, str(error))
    problems.raise_if_any()
    return examples


def _require_columns(source: _Source, kind: str, present: bool, expected: str) -> None:
    if present:
        return
    found_kind = _kind_of_columns(source.columns)
    hint = f" (these columns look like {found_kind} data)" if found_kind else ""
    raise DatasetError(
        f"{source.name}: wrong columns for {kind} data: found {_column_list(source.columns)}; expected {expected}{hint}"
    )


def _kind_of_columns(columns: list[str]) -> str | None:
    if _is_preference(columns):
        return "preference"
    if _is_rl(columns):
        return "rl"
    if _chat_layout(columns):
        return "chat"
    return None


def _is_preference(columns: list[str]) -> bool:
    return "chosen" in columns and "rejected" in columns


def _is_rl(columns: list[str]) -> bool:
    return "answer" in columns and ("prompt" in columns or "question" in columns)


def _column_list(columns: list[str]) -> str:
    return ", ".join(columns) if columns else "(none)"


# --- chat --------------------------------------------------------------------------------------------------------


def _chat_layout(columns: list[str]) -> str | None:
    if "messages" in columns:
        return "messages"
    if "conversations" in columns:
        return "conversations"
    if "prompt" in columns and "completion" in columns:
        return "prompt/completion"
    if "instruction" in columns and "output" in columns:
        return "instruction/output"
    return None


def _chat_converter(source: _Source) -> Callable[[dict], list[dict]]:
    layout = _chat_layout(source.columns)
    _require_columns(source, "chat", layout is not None, CHAT_COLUMNS_EXPECTED)
    assert layout is not None  # _require_columns raised otherwise
    return lambda row: _chat_from_row(row, layout)


def _chat_from_row(row: dict, layout: str) -> list[dict]:
    if layout in ("messages", "conversations"):
        messages = _messages(_field(row, layout), layout)
    elif layout == "prompt/completion":
        messages = _system(row) + _turns(_field(row, "prompt"), "prompt", "user")
        messages += _turns(_field(row, "completion"), "completion", "assistant")
    else:
        instruction = _text(_field(row, "instruction"), "instruction")
        extra = row.get("input")
        if extra is not None and not isinstance(extra, str):
            raise _RowError(f"'input' is {_describe(extra)}; expected a string")
        user = f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction
        output = _text(_field(row, "output"), "output")
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": output}]
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        raise _RowError("no assistant message with non-empty content (nothing to train on)")
    for number, (before, after) in enumerate(zip(messages, messages[1:]), start=1):
        if before["role"] == after["role"] == "user":
            raise _RowError(f"messages {number} and {number + 1} are both from the user: a reply is missing between")
    return messages


def _field(row: dict, key: str) -> Any:
    value = row.get(key)
    if value is None:
        raise _RowError(f"'{key}' is missing")
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise _RowError(f"'{key}' is {_describe(value)}; expected a string")
    if not value.strip():
        raise _RowError(f"'{key}' is empty")
    return value


def _system(row: dict) -> list[dict]:
    value = row.get("system")
    if value is None or value == "":
        return []
    return [{"role": "system", "content": _text(value, "system")}]


def _turns(value: Any, key: str, role: str) -> list[dict]:
    """A string is one message with `role`; a list is messages (TRL's conversational prompt/completion)."""
    if isinstance(value, list):
        return _messages(value, key)
    return [{"role": role, "content": _text(value, key)}]


def _messages(value: Any, key: str) -> list[dict]:
    if not isinstance(value, list):
        raise _RowError(f'\'{key}\' is {_describe(value)}; expected a list of {{"role", "content"}} messages')
    if not value:
        raise _RowError(f"'{key}' is an empty list")
    messages = []
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict):
            raise _RowError(f"{key} message {number} is {_describe(message)}; expected an object with role and content")
        if message.get("role") is None and message.get("from") is not None:  # ShareGPT: from/value
            speaker, content = message["from"], message.get("value")
            role = SHAREGPT_ROLES.get(str(speaker).lower())
            if role is None:
                raise _RowError(
                    f"{key} message {number} has unknown speaker 'from': {speaker!r}; expected human, gpt or system"
                )
        else:
            role, content = message.get("role"), message.get("content")
            if role is None:
                raise _RowError(f"{key} message {number} has no 'role'")
            if role not in ROLES:
                raise _RowError(f"{key} message {number} has unknown role {role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise _RowError(f"{key} message {number} ({role}): content is {_describe(content)}; expected a string")
        messages.append({"role": role, "content": content})
    return messages


# --- preference --------------------------------------------------------------------------------------------------


def _pair_from_row(row: dict) -> PreferencePair:
    chosen_value, rejected_value = _field(row, "chosen"), _field(row, "rejected")
    if chosen_value == rejected_value:
        raise _RowError("'chosen' and 'rejected' are identical; a pair needs two different answers")
    chosen, rejected = _side(chosen_value, "chosen"), _side(rejected_value, "rejected")
    prompt_value = row.get("prompt")
    if prompt_value is not None and prompt_value != "":
        prompt = _system(row) + _turns(prompt_value, "prompt", "user")
        shared = len(prompt) if chosen[: len(prompt)] == prompt == rejected[: len(prompt)] else 0
        chosen, rejected = chosen[shared:], rejected[shared:]  # UltraFeedback repeats the prompt in both
    elif isinstance(chosen_value, str) and isinstance(rejected_value, str) and len(chosen) == len(rejected) == 1:
        raise _RowError("'prompt' is missing; text answers in chosen/rejected need a prompt column")
    else:  # HH style: two full conversations that share the prompt
        shared = _common_prefix_length(chosen, rejected)
        if shared == 0:
            raise _RowError(
                "chosen and rejected share no first message, so there is no prompt; with no 'prompt' column they "
                "must be full conversations that start the same way"
            )
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    for key, side in (("chosen", chosen), ("rejected", rejected)):
        if not side:
            raise _RowError(f"'{key}' has nothing after the shared prompt")
        if side[-1]["role"] != "assistant":
            raise _RowError(f"the last message of '{key}' is from {side[-1]['role']}; expected assistant")
        if not side[-1]["content"].strip():
            raise _RowError(f"the last message of '{key}' is empty")
    if chosen == rejected:
        raise _RowError("'chosen' and 'rejected' are identical after the shared prompt")
    return PreferencePair(prompt=prompt, chosen=chosen, rejected=rejected)


def _side(value: Any, key: str) -> list[dict]:
    if isinstance(value, str):
        return _hh_text_messages(value) or [{"role": "assistant", "content": _text(value, key)}]
    return _messages(value, key)


_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")


def _hh_text_messages(text: str) -> list[dict] | None:
    """Anthropic HH's raw text ("\\n\\nHuman: ...\\n\\nAssistant: ...") as messages; None for other text."""
    text = text.lstrip("\n")
    if not text.startswith("Human:"):
        return None
    parts = _HH_TURN.split(text)[1:]  # [speaker, content, speaker, content, ...]
    return [
        {"role": "user" if speaker == "Human" else "assistant", "content": content.strip()}
        for speaker, content in zip(parts[0::2], parts[1::2])
    ]


def _common_prefix_length(a: list[dict], b: list[dict]) -> int:
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


# --- rl ----------------------------------------------------------------------------------------------------------


def _problem_from_row(row: dict, default_grader: str) -> RLProblem:
    key = "prompt" if row.get("prompt") is not None else "question"
    if row.get(key) is None:
        raise _RowError("'prompt' (or 'question') is missing")
    prompt = _text(row[key], key)
    answer = row.get("answer")
    if answer is None:
        raise _RowError("'answer' is missing")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise _RowError(f"'answer' is {_describe(answer)}; expected a string or a number")
    answer = _text(str(answer), "answer")
    grader = row.get("grader") or default_grader
    if not isinstance(grader, str):
        raise _RowError(f"'grader' is {_describe(grader)}; expected a grader name")
    problem = _answer_problem(grader, answer)
    if problem:
        raise _RowError(f"answer {answer!r} does not suit grader '{grader}': {problem}")
    tolerance = row.get("tolerance")
    if tolerance is not None and not (isinstance(tolerance, float) and tolerance != tolerance):  # NaN: an empty cell
        from cookbook_engine.rl.text_graders import validate_tolerance

        if grader != "numeric":
            raise _RowError(f"'tolerance' is a setting of the numeric grader, not of '{grader}'")
        try:
            tolerance = validate_tolerance(answer, tolerance)
        except ValueError as error:
            raise _RowError(str(error)) from None
    else:
        tolerance = None
    return RLProblem(prompt=prompt, answer=answer, grader=grader, tolerance=tolerance)


def _answer_problem(grader: str, answer: str) -> str | None:
    """What is wrong with `answer` for `grader` (unknown grader, a numeric answer that is no number, a regex that
    does not compile, ...), or None. The RL graders own these rules."""
    from cookbook_engine.rl.graders import validate_answer  # lazy: graders pull in the sandbox

    try:
        validate_answer(grader, answer)
    except ValueError as error:
        return str(error)
    return None


# ----------------------------------------------------------------------------------------------------------------
# Splitting, names, descriptions
# ----------------------------------------------------------------------------------------------------------------


def _shuffled(items: list, seed: int) -> list:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items


MIN_ITEMS_FOR_FORCED_TEST = 10


def _split(items: list, test_fraction: float, seed: int, max_examples: int | None) -> tuple[list, list]:
    """Deterministic shuffle, then (train, test): `test_fraction` of the items, rounded, and at least one once
    there are MIN_ITEMS_FOR_FORCED_TEST items (below that, a forced test item would take a large share of tiny
    data: 1 of 2 rows is not a 10% split)."""
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples must be at least 1, got {max_examples}")
    items = _shuffled(items, seed)[:max_examples]
    test_count = round(len(items) * test_fraction)
    if test_fraction > 0 and len(items) >= MIN_ITEMS_FOR_FORCED_TEST:
        test_count = max(test_count, 1)
    test_count = min(test_count, len(items) - 1)
    return items[test_count:], items[:test_count]


def _safe_upload_name(filename: str) -> str:
    name = re.split(r"[\\/]", filename)[-1]  # basename, for both / and \ separators
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    while ".." in name:
        name = name.replace("..", ".")
    name = name.lstrip(".")
    stem, extension = os.path.splitext(name)
    stem = stem.strip("._-")[:100]
    if extension.lower() not in FILE_TYPES:
        raise DatasetError(
            f"{filename}: unsupported file type '{extension or '(none)'}'; upload a {', '.join(FILE_TYPES)} file"
        )
    if not stem:
        raise DatasetError(f"{filename}: not a usable file name; rename the file")
    return stem + extension.lower()


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _rows_hint(value: Any) -> str:
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(inner, list) and inner and all(isinstance(item, dict) for item in inner):
                return f"; the rows seem to be under '{key}': make that list the whole file"
    return ""
