"""Dataset views for the Datasets page: validating an upload, previews, the tokenized view with the loss mask,
and length statistics. Tokenizing uses the engine's renderers; the heavy parts are cached per file version.
Text from files is shown as text only (dataframe cells, st.text/st.code)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from cookbook_engine import models, renderers
from cookbook_engine.data import loading as datasets

GRID_COLUMNS = 12
MAX_EXAMPLES_FOR_STATS = 2000


@dataclass
class Validated:
    kind: str
    num_rows: int
    detail: str


def validate(spec: str, kind: str | None = None) -> Validated:
    """Load every row the way training will (raises DatasetError with row-numbered problems)."""
    kind = kind or datasets.detect_kind(spec)
    if kind == "chat":
        data = datasets.load_chat_dataset(spec, test_fraction=0.0)
        return Validated(kind, len(data.train) + len(data.test), "conversations with an assistant reply to train on")
    if kind == "preference":
        pairs, held_out_pairs = datasets.load_preference_dataset(spec, test_fraction=0.0)
        return Validated(kind, len(pairs) + len(held_out_pairs), "prompt / chosen / rejected pairs")
    problems, held_out_problems = datasets.load_rl_problems(spec, test_fraction=0.0)
    return Validated(kind, len(problems) + len(held_out_problems), "prompts with reference answers and graders")


def preview_frame(spec: str, n: int = 50) -> pd.DataFrame:
    """The first rows with nested values (message lists) as JSON text, so every cell is plain text."""
    rows = datasets.preview(spec, n)
    return pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in rows])


def _cell(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        return "  →  ".join(f"{m['role']}: {m['content']}" for m in value)  # a conversation, readable
    return json.dumps(value, ensure_ascii=False)


def version(spec: str) -> str:
    """Changes when the file changes (cache key); built-ins and hub names are their own version."""
    try:
        stat = os.stat(spec)
        return f"{stat.st_mtime_ns}-{stat.st_size}"
    except OSError:
        return spec


@st.cache_resource(show_spinner=False)
def tokenizer(model: str = models.DEFAULT_MODEL):
    return models.load_tokenizer(model)


@st.cache_data(show_spinner=False, max_entries=32)
def chat_examples(spec: str, file_version: str, limit: int = MAX_EXAMPLES_FOR_STATS) -> list[list[dict]]:
    data = datasets.load_chat_dataset(spec, test_fraction=0.0, max_examples=limit)
    return data.train


@st.cache_data(show_spinner=False, max_entries=32)
def token_stats(spec: str, file_version: str, renderer_name: str, train_on_what: str) -> pd.DataFrame:
    """Per example: total tokens and trained tokens (first MAX_EXAMPLES_FOR_STATS examples)."""
    renderer = renderers.get_renderer(renderer_name, tokenizer())
    rows = []
    for conversation in chat_examples(spec, file_version):
        tokens, weights = renderer.build_supervised_example(conversation, train_on_what)
        rows.append({"tokens": len(tokens), "trained": int(sum(1 for w in weights if w > 0))})
    return pd.DataFrame(rows)


def visible(piece: str) -> str:
    """A token's text with whitespace made visible."""
    return piece.replace(" ", "·").replace("\n", "↵").replace("\t", "→") or "∅"


def token_grid(tokens: list[int], weights: list[float]) -> pd.io.formats.style.Styler:
    """Tokens laid out in rows of GRID_COLUMNS cells; trained tokens (weight > 0) highlighted green."""
    tok = tokenizer()
    cells = [visible(tok.decode([t], skip_special_tokens=False)) for t in tokens]
    trained = [w > 0 for w in weights]
    rows, masks = [], []
    for start in range(0, len(cells), GRID_COLUMNS):
        rows.append(cells[start : start + GRID_COLUMNS] + [""] * max(0, start + GRID_COLUMNS - len(cells)))
        masks.append(trained[start : start + GRID_COLUMNS] + [False] * max(0, start + GRID_COLUMNS - len(cells)))
    frame = pd.DataFrame(
        rows, columns=[str(i) for i in range(GRID_COLUMNS)], index=[str(i) for i in range(0, len(cells), GRID_COLUMNS)]
    )
    mask = pd.DataFrame(masks, columns=frame.columns, index=frame.index)
    return frame.style.apply(
        lambda _: mask.map(lambda m: "background-color: #bbf7d0; color: #14532d" if m else "color: #6b7280"), axis=None
    )
