"""DuckDB storage for the studio (runs, metrics, checkpoints, transcripts, datasets, evaluations, sweeps).

One process owns a database file and holds its only connection (storage/owner.py); every other process makes a
`Store(path)` (or `Store.default()`, the studio home's), whose methods are run by that owner, started on demand
and found through files beside the database (storage/client.py). storage/db.py and storage/evals.py hold the SQL;
storage/interface.py declares RunStore, what the engine and the pages are handed. storage imports nothing from the
engine: the home folder it needs is storage/home.py's, and metric values are cleaned once, in storage/metrics.py.
"""

from storage.client import StorageOwnerError, stop_owner
from storage.db import Store, utcnow
from storage.home import HomeError
from storage.interface import RunStore
from storage.metrics import CleanMetrics, clean_metrics, json_default, metric_value

StoreClient = Store  # the name of the helper-process client before the one-owner design; the same object now

__all__ = [
    "CleanMetrics",
    "HomeError",
    "RunStore",
    "StorageOwnerError",
    "Store",
    "StoreClient",
    "clean_metrics",
    "json_default",
    "metric_value",
    "stop_owner",
    "utcnow",
]
