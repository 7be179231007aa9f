"""The Sweeps page's form, turned into the sweep spec the YAML tab writes by hand, and the table's run links.

A person fills in a kind, a dataset, a step count, rows of "setting: values to try" (a grid), eval sets, the experiment
trackers every member logs to, and whether to evaluate the base model too; `spec_from_form` builds the same mapping a
sweep file holds, so one check (`sweeps.plan`) serves both tabs and the page can show the equivalent YAML. Values are
read as YAML scalars (`3e-4` is a number, `true` a boolean). Not here: planning and running sweeps
(cookbook_engine/evals/sweeps.py), drawing (pages/sweeps.py).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st
import yaml

from cookbook_engine import config as cfg, trackers
from cookbook_engine.evals.sweeps import SweepError, SweepPlan
from cookbook_engine.settings import help_text, leaves

TRACKERS = trackers.TRACKER_NAMES
GRID_COLUMNS = ("Setting", "Values to try")
GRID_EXAMPLE = pd.DataFrame({"Setting": ["learning_rate"], "Values to try": ["3e-4, 1e-3, 3e-3"]})


def setting_help(name: str) -> str:
    """A run setting's help, as the New run form and `--help` show it."""
    return help_text(next(leaf.spec for leaf in leaves(cfg.SLConfig) if leaf.name == name))


def values(text: str, setting: str) -> list[Any]:
    """'3e-4, 1e-3' -> [0.0003, 0.001]: comma-separated YAML scalars."""
    pieces = [piece.strip() for piece in str(text or "").split(",") if piece.strip()]
    if not pieces:
        raise SweepError(f"form, grid row {setting}: give at least one value to try")
    return [_scalar(piece) for piece in pieces]


def _scalar(piece: str) -> Any:
    try:
        value = yaml.safe_load(piece)
    except yaml.YAMLError:
        return piece
    if isinstance(value, str) and _looks_numeric(value):
        return float(value)  # YAML 1.1 reads "3e-4" as text; a person means the number
    return value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def spec_from_form(
    name: str,
    kind: str,
    base: dict[str, Any],
    grid_rows: list[dict[str, Any]],
    evals: list[str],
    include_base: bool,
) -> dict[str, Any]:
    """The sweep spec the form describes (the shape of a sweep file)."""
    grid = {}
    for row in grid_rows:
        setting = str(row.get(GRID_COLUMNS[0]) or "").strip()
        if setting:
            grid[setting] = values(str(row.get(GRID_COLUMNS[1]) or ""), setting)
    if not grid:
        raise SweepError("form: add at least one setting to vary, with the values to try")
    spec: dict[str, Any] = {"kind": kind, "base": {k: v for k, v in base.items() if v not in ("", None)}, "grid": grid}
    if name.strip():
        spec["name"] = name.strip()
    spec["evals"] = list(evals)
    spec["include_base"] = include_base
    return spec


def members_table(plan: SweepPlan) -> pd.DataFrame:
    """One row per planned member: its kind and settings, as text (one type per column)."""
    rows = [
        {"member": str(i), "kind": m.kind, **{k: str(v) for k, v in m.settings.items()}}
        for i, m in enumerate(plan.members)
    ]
    return pd.DataFrame(rows).fillna("")


def as_yaml(spec: dict[str, Any]) -> str:
    return yaml.safe_dump(spec, sort_keys=False, default_flow_style=None)


def with_run_links(table: pd.DataFrame) -> pd.DataFrame:
    """The sweep table with each member's run id as a link to its Run page (a LinkColumn shows the id)."""
    if "run" not in table:
        return table
    linked = table.copy()
    linked["run"] = [f"run?run={run_id}" if run_id else "" for run_id in linked["run"]]
    return linked


@st.cache_data(show_spinner=False)
def eval_set_names() -> list[str]:
    """The built-in eval sets, for the form's picker."""
    from cookbook_engine.evals import sets

    return [row["name"] for row in sets.list_builtin()]
