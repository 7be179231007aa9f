"""The clocked simulator's own settings (backend=clocked): its tick and how many sample requests a tick admits.

A run's config holds them as its `clocked` section (`cookbook sl backend=clocked clocked.period_s=0.2`); only the
clocked backend reads them (backends/clocked.py explains what they mean). Kept apart from clocked.py so that reading
a config imports no model code.
"""

from __future__ import annotations

from dataclasses import dataclass

from cookbook_engine.settings import setting


@dataclass
class ClockedConfig:
    period_s: float = setting(0.05, help="backend=clocked only: the simulator's tick, in seconds", min=0, min_open=True)
    samples_per_tick: int = setting(
        0, help="backend=clocked only: sample requests admitted per tick", min=0, zero_means="all queued"
    )
