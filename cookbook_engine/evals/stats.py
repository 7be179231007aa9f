"""Statistics for evaluation metrics: 95% intervals (Wilson for proportions, percentile bootstrap for the rest),
the unbiased pass@k estimator, and classification scores (accuracy, macro-F1, per-label precision and recall,
confusion matrix).

Every function here is pure arithmetic on plain Python numbers: no model, no storage. Intervals are 95% two-sided.
The bootstrap is seeded, so the same scores always give the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Z_95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0


@dataclass
class Metric:
    """One number of a leaderboard: its value, the examples it rests on, and a 95% interval [low, high]."""

    name: str
    value: float
    n: int
    low: float | None = None
    high: float | None = None
    details: dict = field(default_factory=dict)

    def as_text(self, digits: int = 3) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.{digits}f} (n={self.n})"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] (n={self.n})"


def wilson_interval(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes/n; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: successes={successes} must be between 0 and n={n}")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, round(centre - half, 12)), min(1.0, round(centre + half, 12))


def proportion(name: str, outcomes: Sequence[bool]) -> Metric:
    """The share of True outcomes with its Wilson interval."""
    n = len(outcomes)
    successes = sum(bool(o) for o in outcomes)
    low, high = wilson_interval(successes, n)
    return Metric(name, successes / n if n else 0.0, n, low, high)


def bootstrap_interval(
    items: Sequence,
    statistic: Callable[[Sequence], float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of `statistic` over `items` (resampled with replacement, seeded)."""
    if not items:
        return math.nan, math.nan
    rng = random.Random(seed)
    size = len(items)
    values = sorted(statistic([items[rng.randrange(size)] for _ in range(size)]) for _ in range(resamples))
    return values[int(0.025 * (resamples - 1))], values[int(math.ceil(0.975 * (resamples - 1)))]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def mean_metric(name: str, values: Sequence[float]) -> Metric:
    """The mean of per-example values with a bootstrap interval."""
    low, high = bootstrap_interval(list(values), mean)
    return Metric(name, mean(values), len(values), low, high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n samples of which c pass."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


# ------------------------------------------------------------------------------------------------ classification

UNPARSEABLE = "(unparseable)"


def confusion_matrix(
    labels: Sequence[str], truths: Sequence[str], predictions: Sequence[str | None]
) -> dict[str, dict[str, int]]:
    """counts[true][predicted], predicted None counted under UNPARSEABLE."""
    columns = list(labels) + [UNPARSEABLE]
    counts = {truth: {column: 0 for column in columns} for truth in labels}
    for truth, predicted in zip(truths, predictions):
        counts[truth][predicted if predicted is not None else UNPARSEABLE] += 1
    return counts


def per_label_scores(
    labels: Sequence[str], truths: Sequence[str], predictions: Sequence[str | None]
) -> dict[str, dict[str, float]]:
    """precision, recall, f1 and support of each label; an unparseable reply is a miss for its true label."""
    scores = {}
    for label in labels:
        true_positive = sum(t == label and p == label for t, p in zip(truths, predictions))
        predicted = sum(p == label for p in predictions)
        support = sum(t == label for t in truths)
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores[label] = {"precision": precision, "recall": recall, "f1": f1, "support": support, "predicted": predicted}
    return scores


def macro_f1(labels: Sequence[str], pairs: Sequence[tuple[str, str | None]]) -> float:
    truths = [t for t, _ in pairs]
    predictions = [p for _, p in pairs]
    scores = per_label_scores(labels, truths, predictions)
    return mean([scores[label]["f1"] for label in labels])


def classification_metrics(
    labels: Sequence[str], truths: Sequence[str], predictions: Sequence[str | None]
) -> list[Metric]:
    """accuracy (Wilson), macro_f1 (bootstrap), unparseable share (Wilson), per-label precision and recall (Wilson
    over the label's predictions and support), and the confusion matrix in accuracy's details."""
    n = len(truths)
    pairs = list(zip(truths, predictions))
    accuracy = proportion("accuracy", [t == p for t, p in pairs])
    accuracy.details = {"confusion": confusion_matrix(labels, truths, predictions), "labels": list(labels)}
    low, high = bootstrap_interval(pairs, lambda sample: macro_f1(labels, sample))
    metrics = [
        accuracy,
        Metric("macro_f1", macro_f1(labels, pairs), n, low, high),
        proportion("unparseable", [p is None for p in predictions]),
    ]
    scores = per_label_scores(labels, truths, predictions)
    for label in labels:
        hits = sum(t == label and p == label for t, p in pairs)
        s = scores[label]
        predicted, support = int(s["predicted"]), int(s["support"])  # counts, kept in the float table
        metrics.append(Metric(f"precision/{label}", s["precision"], predicted, *wilson_interval(hits, predicted)))
        metrics.append(Metric(f"recall/{label}", s["recall"], support, *wilson_interval(hits, support)))
    return metrics
