"""Backends behind the one client protocol: `local` (torch + peft here), `tinker` (the hosted service), and
`clocked` (the local backend admitted only at clock ticks, to count pipelining cycles). `service_client()` picks one;
nothing else in the engine needs to know which it got."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cookbook_engine.backends.clocked_settings import ClockedConfig


def service_client(
    backend: str = "local", *, device: str = "auto", dtype: str = "auto", clocked: ClockedConfig | None = None
):
    """`device` (auto, cpu, cuda, mps) and `dtype` (auto, fp32, bf16) apply to the local backend only
    (cookbook_engine/device.py), `clocked`
    (the tick and samples per tick; defaults when None) to the clocked backend only."""
    from cookbook_engine.models import HF_IMPORT_LOCK

    if backend == "local":
        with HF_IMPORT_LOCK:
            from cookbook_engine.backends.local import LocalServiceClient

        return LocalServiceClient(device=device, dtype=dtype)
    if backend == "tinker":
        from cookbook_engine.backends.tinker import hosted_service_client

        return hosted_service_client()
    if backend == "clocked":
        with HF_IMPORT_LOCK:
            from cookbook_engine.backends.clocked import ClockedServiceClient
        from cookbook_engine.backends.clocked_settings import ClockedConfig as Defaults

        return ClockedServiceClient.from_config(clocked or Defaults())
    raise ValueError(f"backend {backend!r} is unknown; choose local, tinker or clocked")
