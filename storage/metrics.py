"""How a metric value becomes storable, in one place: what RunLogger writes to metrics.jsonl and what the store
puts in DuckDB are the same cleaned values, checked once.

`clean_metrics` turns numpy/torch scalars and bools into floats, refuses what is not a number, and turns non-finite
values (NaN, inf) into None (null in metrics.jsonl, NULL in DuckDB). It returns a `CleanMetrics`, which a second
`clean_metrics` (the store's, after RunLogger's) passes through unchanged. Also `json_default`, the one JSON
fallback for paths and scalars that the store and the run folder's files share. Not here: SQL (storage/db.py),
files (cookbook_engine/training/run_logger.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class CleanMetrics(dict[str, float | None]):
    """One step's metrics after `clean_metrics`: name -> float, None where the value was not finite."""


def metric_value(value: Any, where: str) -> float:
    """A metric value as a float: numpy/torch scalars and 1-element tensors are unwrapped, bools become 0/1."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError) as exc:
            raise TypeError(
                f"{where}: expected a scalar, got an array/tensor of shape {getattr(value, 'shape', '?')}"
            ) from exc
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise TypeError(f"{where}: expected a number, got {type(value).__name__} {value!r}")


def finite_or_none(value: float) -> float | None:
    """The value, or None when it is NaN or infinite (how a missing point is stored)."""
    return value if math.isfinite(value) else None


def clean_metrics(metrics: Mapping[str, Any], where: str) -> CleanMetrics:
    """Check a metrics dict (str -> number) and return it with plain float values, None for non-finite ones.
    Metrics cleaned already (a CleanMetrics) are returned as they are: the check runs once per step."""
    if isinstance(metrics, CleanMetrics):
        return metrics
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{where}: metrics must be a dict of name -> number, got {type(metrics).__name__}")
    cleaned = CleanMetrics()
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where}: metric names must be non-empty strings, got {name!r}")
        cleaned[name] = finite_or_none(metric_value(value, f"{where}, metric {name!r}"))
    return cleaned


def json_default(value: Any) -> Any:
    """json.dumps' fallback: paths become strings, numpy/torch scalars their Python value."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    raise TypeError(f"value of type {type(value).__name__} is not JSON serialisable: {value!r}")
