"""The Datasets page's logic without Streamlit: built-ins then uploads to browse, a new upload's name is checked,
a bad upload leaves no file behind, a good one is registered and removable, token totals are the four headlines."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from app import datasets_view as view
from cookbook_engine import paths
from cookbook_engine.data import loading as datasets
from storage import Store

BUILTIN = [{"name": "facts", "kind": "chat", "num_rows": 10, "description": "a few facts"}]
UPLOADED = [{"name": "mine", "kind": "rl", "num_rows": 3, "path": "/u/mine.jsonl", "meta": {"filename": "m.jsonl"}}]


def test_the_browse_list_has_the_builtins_then_the_uploads():
    entries = view.browse_entries(BUILTIN, UPLOADED)
    assert list(entries) == ["builtin:facts", view.upload_key("mine")]
    builtin, uploaded = entries.values()
    assert builtin.label == "facts · built-in chat" and builtin.spec == "builtin:facts" and not builtin.uploaded
    assert uploaded.caption == "3 rows · rl data · from m.jsonl" and uploaded.uploaded and uploaded.name == "mine"


def test_a_new_upload_needs_a_free_name():
    assert view.name_problem("  ", UPLOADED) == "Give the dataset a name."
    assert "exists already" in view.name_problem("mine ", UPLOADED)
    assert view.name_problem("other", UPLOADED) is None


@pytest.fixture
def store(tmp_path, monkeypatch) -> Store:
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    return Store.default()


def test_a_bad_upload_leaves_no_file_and_a_good_one_is_registered_and_removable(store):
    with pytest.raises(datasets.DatasetError):
        view.save_and_validate("bad.jsonl", b'{"nothing": 1}\n', "chat")
    assert list(paths.uploads_dir().iterdir()) == []

    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)]
    saved, result = view.save_and_validate("sums.jsonl", "\n".join(map(json.dumps, rows)).encode(), "detect")
    assert result.kind == "rl" and result.num_rows == 3
    assert view.register_upload(store, " sums ", saved, result, "sums.jsonl").startswith("Added sums: 3 rl rows")
    entry = view.browse_entries([], store.list_datasets())[view.upload_key("sums")]
    view.remove_upload(store, entry)
    assert store.list_datasets() == [] and not saved.exists()
    with pytest.raises(ValueError, match="only uploads"):
        view.remove_upload(store, view.browse_entries(BUILTIN, [])["builtin:facts"])


def test_token_totals_and_the_mask_caption():
    stats = pd.DataFrame({"tokens": [1200, 30], "trained": [100, 10]})
    assert view.token_totals(stats) == [
        ("Examples", 2),
        ("Total tokens", "1,230"),
        ("Trained tokens", "110"),
        ("Longest example", "1,200"),
    ]
    assert view.mask_caption([1, 2, 3], [0.0, 1.0, 1.0]) == "3 tokens, 2 trained (green). · is a space, ↵ a newline."
