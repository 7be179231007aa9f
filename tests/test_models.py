"""Loading the base model (cookbook_engine/models.py): two loads at once on two threads, as two model workers
starting together do (an fp32 one and a bf16 one, or a page's and a run's), each give a whole model. Without the
load lock, one of them came out with its tied LM head on the meta device and its first sample failed."""

from __future__ import annotations

import threading

import torch

from cookbook_engine import models


def test_two_models_loaded_at_once_on_two_threads_are_both_whole(default_model_ready):
    loaded: dict[str, torch.nn.Module] = {}

    def load(key: str, dtype: torch.dtype) -> None:
        loaded[key] = models.load_model(default_model_ready, dtype)

    for round_ in range(2):
        threads = [
            threading.Thread(target=load, args=(f"fp32-{round_}", torch.float32)),
            threading.Thread(target=load, args=(f"bf16-{round_}", torch.bfloat16)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(loaded) == 4
    for key, model in loaded.items():
        meta = [name for name, tensor in model.state_dict().items() if tensor.is_meta]
        assert not meta, f"{key}: {meta[:3]}"
        assert not model.get_output_embeddings().weight.is_meta, key
