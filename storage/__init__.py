"""DuckDB storage for the studio (runs, metrics, checkpoints, transcripts, datasets). storage/db.py is the store
(every call opens the file for one short transaction); storage/service.py is StoreClient, the same methods executed
by a helper process, which training processes and the studio use so that they never open DuckDB themselves. Both
implement storage/interface.py's RunStore. storage imports nothing from the engine: the home folder it needs is
storage/home.py's, and metric values are cleaned once, in storage/metrics.py."""

from storage.db import StorageBusyError, Store, utcnow
from storage.home import HomeError
from storage.interface import RunStore
from storage.metrics import CleanMetrics, clean_metrics, json_default, metric_value
from storage.service import StorageServiceError, StorageWriteError, StoreClient

__all__ = [
    "CleanMetrics",
    "HomeError",
    "RunStore",
    "StorageBusyError",
    "StorageServiceError",
    "StorageWriteError",
    "Store",
    "StoreClient",
    "clean_metrics",
    "json_default",
    "metric_value",
    "utcnow",
]
