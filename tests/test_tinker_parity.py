"""In-process parity with the tinker SDK that needs no model: the service client's constructor, context manager and
close; futures of clients usable as the client with one FutureWarning per attribute (as the SDK's backcompat
futures); options that cannot be honoured warn once or raise; tinker:// paths resolve to the local checkpoint
folders; the REST stand-in lists, describes, re-times and deletes checkpoints, and expired ones are swept."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

import pytest
import torch
from tinker import types

from cookbook_engine.backends import compat, rest
from cookbook_engine.backends.local import (
    LocalServiceClient,
    save_adapter_folder,
    write_checkpoint_meta,
    write_run_meta,
)
from cookbook_engine.backends.protocol import ClientFuture, LocalFuture


def fake_checkpoint(model_id: str, kind: str, name: str, ttl_seconds: int | None = None) -> str:
    """A real (tiny) adapter folder with its checkpoint.json, as a training client saves one; its tinker:// path."""
    path = compat.tinker_path(model_id, kind, name)
    folder = compat.resolve(path)
    save_adapter_folder(folder, {"w": torch.zeros(2)}, "HuggingFaceTB/SmolLM2-135M-Instruct", 4, ["q_proj"])
    write_checkpoint_meta(folder, ttl_seconds, {"note": name})
    return path


def test_the_service_client_takes_the_sdks_constructor_arguments_and_is_a_context_manager(home):
    with LocalServiceClient({"team": "a"}, "project-1", display_name="demo") as service:
        assert (service.user_metadata, service.project_id, service.display_name) == ({"team": "a"}, "project-1", "demo")
        assert service.get_telemetry() is None
    assert service.closed and service.close_status == "success"
    with pytest.raises(RuntimeError, match="closed"):
        service.create_sampling_client(base_model="default").result()
    with pytest.raises(ValueError, match="status"):
        LocalServiceClient().close("done")


def test_options_the_local_backend_cannot_use_warn_once(home):
    compat._warned.discard("service:base_url")
    with pytest.warns(UserWarning, match="base_url not used"):
        LocalServiceClient(base_url="http://example.invalid")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LocalServiceClient(base_url="http://example.invalid")  # the second time: silent


def test_a_future_of_a_client_is_the_client_after_result_and_warns_once_when_used_as_it():
    class Client:
        model_id = "m"

        def ping(self):
            return "pong"

    future = ClientFuture(LocalFuture.completed(Client()).future())
    assert future.result().ping() == "pong"
    with pytest.warns(FutureWarning, match="ping"):
        assert future.ping() == "pong"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert future.ping() == "pong"


def test_tinker_paths_resolve_to_local_checkpoint_folders_and_back(home):
    path = fake_checkpoint("run7_abc", "weights", "000010")
    folder = compat.resolve(path)
    assert folder == compat.checkpoint_root() / "run7_abc" / "state" / "000010"
    assert compat.to_tinker_path(folder) == path
    assert compat.resolve("/some/folder") == compat.Path("/some/folder")
    with pytest.raises(ValueError, match="tinker://<training_run_id>"):
        compat.resolve("tinker://run7_abc/other/x")


def test_the_rest_client_lists_describes_retimes_and_deletes_checkpoints(home):
    write_run_meta(
        "run8_def",
        {
            "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "lora_rank": 4,
            "train_mlp": False,
            "train_attn": True,
            "user_metadata": {"renderer_name": "x"},
        },
    )
    state = fake_checkpoint("run8_def", "weights", "000002")
    sampler = fake_checkpoint("run8_def", "sampler_weights", "final", ttl_seconds=3600)
    client = LocalServiceClient().create_rest_client()
    listed = client.list_checkpoints("run8_def").result().checkpoints
    assert {c.tinker_path for c in listed} == {state, sampler}
    assert {c.checkpoint_type for c in listed} == {"training", "sampler"}
    assert next(c for c in listed if c.tinker_path == sampler).expires_at is not None
    run = client.get_training_run_by_tinker_path(sampler).result()
    assert (run.training_run_id, run.lora_rank, run.user_metadata) == ("run8_def", 4, {"renderer_name": "x"})
    assert run.last_sampler_checkpoint.tinker_path == sampler
    info = client.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.lora_rank, info.train_attn, info.train_mlp) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        4,
        True,
        False,
    )
    client.set_checkpoint_ttl_from_tinker_path(state, 1).result()
    assert rest.sweep_expired(datetime.now(UTC) + timedelta(seconds=5)) == [compat.resolve(state)]
    assert not compat.resolve(state).exists() and compat.resolve(sampler).exists()
    client.delete_checkpoint_from_tinker_path(sampler).result()
    assert client.list_checkpoints("run8_def").result().checkpoints == []
    with pytest.raises(ValueError, match="not found"):
        client.delete_checkpoint("run8_def", "weights/000002").result()
    with pytest.raises(NotImplementedError, match="list_sessions"):
        client.list_sessions()


def test_optim_step_takes_optim_params_or_adam_params_but_not_both():
    from cookbook_engine.backends.local import _adam_params

    adam = types.AdamParams(learning_rate=1e-3)
    assert _adam_params(adam, None) is adam and _adam_params(None, adam) is adam
    with pytest.raises(TypeError, match="not both"):
        _adam_params(adam, adam)
    with pytest.raises(TypeError, match="needs optim_params"):
        _adam_params(None, None)
