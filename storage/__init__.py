"""DuckDB storage for the studio (runs, metrics, checkpoints, transcripts, datasets). storage/db.py is the store
(every call opens the file for one short transaction); storage/service.py is StoreClient, the same methods executed
by a helper process, which training processes and the studio use so that they never open DuckDB themselves."""

from storage.db import StorageBusyError, Store, clean_metrics, metric_value, utcnow
from storage.service import StorageServiceError, StorageWriteError, StoreClient

__all__ = ["StorageBusyError", "StorageServiceError", "StorageWriteError", "Store", "StoreClient", "clean_metrics",
           "metric_value", "utcnow"]
