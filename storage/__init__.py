"""DuckDB storage for the studio (runs, metrics, checkpoints, transcripts, datasets). See storage/db.py."""

from storage.db import StorageBusyError, Store, clean_metrics, metric_value, utcnow

__all__ = ["StorageBusyError", "Store", "clean_metrics", "metric_value", "utcnow"]
