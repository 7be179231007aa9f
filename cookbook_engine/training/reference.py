"""The other model a loop scores tokens with: DPO's reference, the RL KL penalty's reference, distillation's teacher.

`sampling_client_for(service, base_model, checkpoint, store)` names it once for all three: an empty checkpoint (or
"base") is the base model (on the local backend the worker's own weights with the adapter disabled, no second
copy); a checkpoint path gives its weights, a full state path being swapped for the sampler weights saved with it
when the store knows them (the hosted service samples only from those). Not here: what the loops do with the
log-probs (dpo/loop.py, rl/kl.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cookbook_engine.backends.protocol import SamplingClient, ServiceClient

BASE = "base"


def resolved_client(client: Any) -> Any:
    """A client from a client-creation method, which returns a future of it (as in the tinker SDK 0.38)."""
    return client.result() if hasattr(client, "result") else client


def sampler_path_for(path: str, store: Any = None) -> str:
    """The sampler weights saved with a state path (when the store knows them), else the path itself."""
    for row in store.list_checkpoints() if store is not None else []:
        if row.get("state_path") == path and row.get("sampler_path"):
            return row["sampler_path"]
    return path


def sampling_client_for(service: ServiceClient, base_model: str, checkpoint: str, store: Any = None) -> SamplingClient:
    """The base model ("" or "base"), or a checkpoint's weights, as a sampling client."""
    if not checkpoint or checkpoint == BASE:
        return resolved_client(service.create_sampling_client(base_model=base_model))
    return resolved_client(service.create_sampling_client(model_path=sampler_path_for(checkpoint, store)))
