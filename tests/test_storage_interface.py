"""storage's seams: the store offers every RunStore member with the same signature, storage imports nothing from
the engine, and a metric value is cleaned once and lands the same in metrics.jsonl and in DuckDB."""

from __future__ import annotations

import ast
import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from cookbook_engine import paths
from cookbook_engine.training.run_logger import RunLogger
from storage import CleanMetrics, RunStore, Store, clean_metrics
from storage.db import metrics_table

STORAGE_DIR = Path(__file__).resolve().parent.parent / "storage"


def protocol_members(protocol: type) -> list[str]:
    """The methods a Protocol declares (read from the class, so a member added to it is checked at once)."""
    return sorted(
        name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")
    )


def shape(signature: inspect.Signature) -> list[tuple[str, object, object, bool]]:
    """Parameter names, kinds and annotations, and whether each has a default (RunStore spells defaults `...`)."""
    return [
        (p.name, p.kind, p.annotation, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()
    ] + [("return", None, signature.return_annotation, False)]


def test_the_protocol_declares_the_stores_shared_methods():
    members = protocol_members(RunStore)
    assert len(members) > 20 and {"log_metrics", "get_transcripts", "register_dataset"} <= set(members)
    assert "path" in RunStore.__annotations__


@pytest.mark.parametrize("member", protocol_members(RunStore))
def test_the_store_implements_every_member_with_the_same_signature(member):
    implemented = getattr(Store, member, None)
    assert callable(implemented), f"Store lacks RunStore.{member}"
    declared = inspect.signature(getattr(RunStore, member))
    assert shape(inspect.signature(implemented)) == shape(declared), f"Store.{member}"


def test_the_store_passes_as_a_run_store(tmp_path):
    def path_of(store: RunStore) -> Path:
        return store.path

    assert path_of(Store(tmp_path / "a.duckdb")).name == "a.duckdb"


def engine_imports(path: Path) -> list[str]:
    imported = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
    return [name for name in imported if name.split(".")[0] == "cookbook_engine"]


def test_storage_imports_nothing_from_the_engine():
    modules = sorted(STORAGE_DIR.glob("*.py"))
    assert len(modules) >= 6
    assert {path.name: engine_imports(path) for path in modules} == {path.name: [] for path in modules}


def test_the_engine_finds_the_database_where_storage_does(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_HOME", str(tmp_path / "home"))
    assert Store.default().path == paths.db_path() == paths.home() / "studio.duckdb"


ODD_METRICS = {
    "nan": float("nan"),
    "inf": float("inf"),
    "minus_inf": -math.inf,
    "np32": np.float32(0.25),
    "tensor": torch.tensor(1.5),
    "flag": True,
    "count": np.int64(3),
}
CLEAN = {"nan": None, "inf": None, "minus_inf": None, "np32": 0.25, "tensor": 1.5, "flag": 1.0, "count": 3.0}


def test_clean_metrics_runs_once():
    cleaned = clean_metrics(ODD_METRICS, "test")
    assert isinstance(cleaned, CleanMetrics) and cleaned == CLEAN
    assert clean_metrics(cleaned, "again") is cleaned
    assert metrics_table("r", 0, cleaned).column("value").to_pylist() == list(CLEAN.values())


def test_odd_and_non_finite_values_land_the_same_in_the_file_and_the_store(tmp_path):
    store = Store(tmp_path / "studio.duckdb")
    store.create_run("r", name="r", kind="sl", backend="local", base_model="m", config={}, log_dir=tmp_path / "r")
    logger = RunLogger(store, "r", tmp_path / "r")
    logger.log_metrics(0, ODD_METRICS)
    in_file = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    stored = {row.name: (None if math.isnan(row.value) else row.value) for row in store.get_metrics("r").itertuples()}
    assert in_file == {"step": 0, **CLEAN} and stored == CLEAN
    assert logger.latest == {name: value for name, value in CLEAN.items() if value is not None}
    direct = Store(tmp_path / "direct.duckdb")
    direct.create_run("r", name="r", kind="sl", backend="local", base_model="m", config={}, log_dir=tmp_path / "r")
    direct.log_metrics("r", 0, ODD_METRICS)  # straight to the store, not through the logger: the same values
    assert direct.get_metrics("r").equals(store.get_metrics("r"))
