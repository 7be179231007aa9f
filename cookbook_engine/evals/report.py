"""Tables for people: the leaderboard of one or more evaluation jobs, and per-example disagreements.

Pure pandas on what storage/evals.py returns: no model, no SQL, no Streamlit (the CLI prints these tables, the
studio's Evaluate page shows them). The leaderboard has one row per model and, per eval set, the set's headline
metrics as "value [low, high]" text plus numeric columns for charts; the best model of each column is marked.
"""

from __future__ import annotations

import math

import pandas as pd

# The headline metrics of each kind, in column order; every other metric stays in the long table.
HEADLINE = {
    "generation": ("accuracy", "pass@1"),
    "classification": ("accuracy", "macro_f1", "unparseable"),
    "preference": ("accuracy", "ties", "reward_accuracy"),
    "nll": ("nll",),
    "episodes": ("accuracy", "tool_calls"),
}
LOWER_IS_BETTER = ("nll", "ppl", "unparseable", "ties", "reward_ties")


def headline_metrics(kind: str, available: list[str]) -> list[str]:
    names = [m for m in HEADLINE.get(kind, ()) if m in available]
    names += sorted(m for m in available if m.startswith("pass@") and m not in names)
    return names


def interval_text(value: float, low: float | None, high: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def leaderboard_long(metrics: pd.DataFrame, kinds: dict[str, str]) -> pd.DataFrame:
    """The headline rows of a metrics frame: model, eval_set, metric, value, low, high, n, best (bool)."""
    keep = []
    for eval_set, group in metrics.groupby("eval_set", sort=False):
        names = headline_metrics(kinds.get(eval_set, ""), list(group["metric"].unique()))
        keep.append(group[group["metric"].isin(names)])
    if not keep:
        return metrics.iloc[0:0].assign(best=pd.Series(dtype=bool))
    table = pd.concat(keep)[["model", "eval_set", "metric", "value", "low", "high", "n"]].copy()
    table["best"] = False
    for (_, metric), group in table.groupby(["eval_set", "metric"]):
        values = group["value"].dropna()
        if len(values) < 2 or values.nunique() == 1:
            continue
        best = values.min() if metric in LOWER_IS_BETTER else values.max()
        table.loc[group.index[group["value"] == best], "best"] = True
    return table.reset_index(drop=True)


def leaderboard(metrics: pd.DataFrame, kinds: dict[str, str]) -> pd.DataFrame:
    """Wide table: one row per model, a "set · metric" column each holding "value [low, high]" (★ on the best)."""
    long = leaderboard_long(metrics, kinds)
    if long.empty:
        return pd.DataFrame()
    long["column"] = long["eval_set"].str.removeprefix("builtin:") + " · " + long["metric"]
    long["text"] = [
        ("★ " if best else "") + interval_text(v, lo, hi)
        for v, lo, hi, best in zip(long["value"], long["low"], long["high"], long["best"])
    ]
    models = list(dict.fromkeys(long["model"]))
    columns = list(dict.fromkeys(long["column"]))
    wide = long.pivot(index="model", columns="column", values="text").reindex(index=models, columns=columns)
    return wide.fillna("–").reset_index()


def answers_side_by_side(examples: pd.DataFrame) -> pd.DataFrame:
    """One row per example of one eval set: prompt, reference, then each model's output and correctness."""
    if examples.empty:
        return pd.DataFrame()
    base = examples.drop_duplicates("idx").set_index("idx")[["prompt", "reference"]]
    for model, rows in examples.groupby("model", sort=False):
        rows = rows.set_index("idx")
        base[f"{model} · output"] = rows["output"]
        base[f"{model} · correct"] = rows["correct"]
    return base.reset_index()


def disagreements(examples: pd.DataFrame, model_a: str, model_b: str) -> pd.DataFrame:
    """Examples where two models' correctness differs (or, for sets without correctness, their outputs differ)."""
    a = examples[examples["model"] == model_a].set_index("idx")
    b = examples[examples["model"] == model_b].set_index("idx")
    shared = a.index.intersection(b.index)
    a, b = a.loc[shared], b.loc[shared]
    if a["correct"].notna().all() and b["correct"].notna().all():
        differ = a["correct"].astype(bool) != b["correct"].astype(bool)
    else:
        differ = a["output"] != b["output"]
    return pd.DataFrame(
        {
            "idx": shared[differ.values],
            "prompt": a["prompt"][differ],
            "reference": a["reference"][differ],
            f"{model_a}": a["output"][differ],
            f"{model_a} correct": a["correct"][differ],
            f"{model_b}": b["output"][differ],
            f"{model_b} correct": b["correct"][differ],
        }
    ).reset_index(drop=True)


def print_leaderboard(metrics: pd.DataFrame, kinds: dict[str, str]) -> str:
    """The leaderboard as fixed-width text (for the CLI)."""
    wide = leaderboard(metrics, kinds)
    if wide.empty:
        return "(no results)"
    return wide.to_string(index=False)
