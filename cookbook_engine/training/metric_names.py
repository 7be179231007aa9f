"""The one home of each run kind's key metric: the number a run is judged by at a glance.

The run log's step lines, the CLI's `cookbook runs`, the studio's run tables and cards, and a sweep's table all
quote it. The names are the cookbook's (the loops log them; see sl/loop.py, dpo/loop.py, rl/metrics.py).
Not here: how a metric is labelled or charted (app/charts.py).
"""

from __future__ import annotations

KEY_METRIC: dict[str, str] = {
    "sl": "train_mean_nll",
    "dpo": "dpo_loss",
    "rl": "env/all/reward/total",
    "distill": "teacher_kl",
}


# The key metric in a word or two, where space is short (the studio's runs table); its help names the metric in full
KEY_METRIC_SHORT: dict[str, str] = {"sl": "loss", "dpo": "DPO loss", "rl": "reward", "distill": "KL"}


def key_metric(kind: str) -> str:
    """The key metric of a run of this kind ("sl", "dpo", "rl"); "" for a run of no known kind."""
    return KEY_METRIC.get(kind, "")
