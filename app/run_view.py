"""What the Run page shows, computed without drawing: the metric cards (latest value and change since the first
step), the chart groups, the checkpoints table, the header's facts and the log's last lines.

Plain functions over a run's row and its long metrics frame (step, name, value) as the store returns them; the page
(pages/run.py) lays them out as widgets. Not here: reading storage, the status badge and buttons (app/widgets.py,
app/actions.py), figures (app/charts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from app import charts

LOG_FILE = "log.txt"
LOG_TAIL_LINES = 300
ChartGroups = list[tuple[str, list[str]]]


# What the raw metric names mean, for the cards (the raw name stays in each card's help)
PLAIN_NAMES = {
    "train_mean_nll": "Training loss (NLL)",
    "test/nll": "Held-out loss (NLL)",
    "dpo_loss": "DPO loss",
    "accuracy": "Preference accuracy",
    "margin": "Reward margin",
    "chosen_nll": "Chosen replies' loss",
    "env/all/reward/total": "Mean reward",
    "env/all/correct": "Correct (training)",
    "test/env/all/correct": "Correct (held out)",
    "env/all/format": "Well-formatted",
    "optim/kl_sample_train": "KL, sampler vs learner",
    "teacher_kl": "KL to the teacher (per token)",
    "kl_policy_base": "KL to the reference (per token)",
    "env/all/ac_tokens_per_turn": "Tokens per answer",
    "learning_rate": "Learning rate",
    "optim/lr": "Learning rate",
    "optim/entropy": "Entropy",
}


@dataclass(frozen=True)
class MetricCard:
    """One card above the charts: the metric's latest value and its change since its first logged value."""

    name: str  # in plain words
    value: str
    delta: str | None  # None when the metric has not changed (or has one point)
    raw_name: str = ""  # as logged


def metric_cards(metrics_df: pd.DataFrame) -> list[MetricCard]:
    """Cards for the key metrics present (charts.card_metrics picks at most five), from a long metrics frame."""
    logged = metrics_df.dropna(subset=["value"]).groupby("name")["value"]
    latest, firsts = logged.last(), logged.first()
    cards = []
    for name in charts.card_metrics(list(latest.index)):
        delta = latest[name] - firsts[name] if name in firsts else None
        cards.append(
            MetricCard(PLAIN_NAMES.get(name, name), f"{latest[name]:.3g}", None if not delta else f"{delta:+.2g}", name)
        )
    return cards


@dataclass(frozen=True)
class ChartLayout:
    """The run's charts: the main ones, then 'more metrics' and 'timing' (each a list of (title, metric names))."""

    main: ChartGroups
    more: ChartGroups
    timing: ChartGroups


def chart_layout(metrics_df: pd.DataFrame) -> ChartLayout:
    """The chart groups; under "more metrics" only those that change (a flat line, e.g. epoch 0, is one number:
    see `unchanged`)."""
    main, more, timing = charts.metric_groups(sorted(metrics_df["name"].unique()))
    flat = set(unchanged(metrics_df))
    more = [(title, names) for title, names in more if not set(names) <= flat]
    return ChartLayout(main, more, timing)


def unchanged(metrics_df: pd.DataFrame) -> dict[str, float]:
    """Metrics logged at two or more steps whose value never changed: {name: value}."""
    logged = metrics_df.dropna(subset=["value"]).groupby("name")["value"]
    stats = logged.agg(["min", "max", "count"])
    flat = stats[(stats["min"] == stats["max"]) & (stats["count"] > 1)]
    return {str(name): float(row["min"]) for name, row in flat.iterrows()}


def rows_of(groups: ChartGroups, per_row: int) -> list[ChartGroups]:
    """Chart groups split into rows of `per_row` charts."""
    return [groups[i : i + per_row] for i in range(0, len(groups), per_row)]


def header_facts(run: dict[str, Any], kind_label: str, created: str, time_facts: Sequence[str]) -> list[str]:
    """The caption under the run's title: kind, model, backend, age, time facts, the run it started from."""
    facts = [kind_label, run["base_model"], f"backend {run['backend']}", f"created {created}", *time_facts]
    if run.get("parent_run_id"):
        facts.append(f"started from {run['parent_run_id']}")
    return facts


def no_checkpoints_text(config: dict[str, Any]) -> str:
    save_every = config.get("save_every")
    return (
        f"No checkpoints yet (this run saves every {save_every} steps and at the end)."
        if save_every
        else "No checkpoints yet (this run saves at the end)."
    )


def checkpoint_rows(
    checkpoints: Sequence[dict[str, Any]], age: Callable[[datetime | None], str]
) -> list[dict[str, Any]]:
    """The checkpoints table, newest first as given; `age` turns a timestamp into '5 min ago'."""
    return [
        {
            "Step": c["step"],
            "Name": c["name"],
            "Kind": c["kind"],
            "Final": bool((c.get("loop_state") or {}).get("final")),
            "Saved": age(c["created_at"]),
            "State path": c.get("state_path") or "",
            "Sampler path": c.get("sampler_path") or "",
        }
        for c in checkpoints
    ]


def log_tail(log_dir: str | Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of the run's log.txt ([] before it exists)."""
    log_file = Path(log_dir) / LOG_FILE
    if not log_file.exists():
        return []
    return log_file.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
