"""Backends behind the one client protocol: `local` (torch + peft here), `tinker` (the hosted service), and
`clocked` (the local backend admitted only at clock ticks, to count pipelining cycles). `service_client()` picks one;
nothing else in the engine needs to know which it got."""

from __future__ import annotations


def service_client(backend: str = "local", *, device: str = "auto", clock_period_s: float = 0.05,
                   clock_samples_per_tick: int = 0):
    """`device` (auto, cpu, cuda, mps) applies to the local backend only (cookbook_engine/device.py)."""
    if backend == "local":
        from cookbook_engine.backends.local import LocalServiceClient

        return LocalServiceClient(device=device)
    if backend == "tinker":
        from cookbook_engine.backends.tinker import hosted_service_client

        return hosted_service_client()
    if backend == "clocked":
        from cookbook_engine.backends.clocked import ClockedServiceClient

        return ClockedServiceClient(period_s=clock_period_s, samples_per_tick=clock_samples_per_tick)
    raise ValueError(f"backend {backend!r} is unknown; choose local, tinker or clocked")
