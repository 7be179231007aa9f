"""tinker-cookbook 0.6.1's own checkpoint code, unmodified, in process (LocalServiceClient) and over HTTP (the tinker
SDK against `cookbook serve`): both return ONE path form, tinker://<run>/weights|sampler_weights/<name>.
`CheckpointManager` rolls its resume-only saves (each new one deletes the previous, the final save deletes the last),
`checkpoint_utils` reads the renderer name back from the training run's metadata through the REST client, and the REST
calls it and the recipes make (runs by path and id, checkpoint lists, TTL) answer the same both ways. The SDK's own
`training_client.get_tokenizer()` works with the hub offline (get_info names the model's local folder)."""

from __future__ import annotations

import pytest

pytest.importorskip("tinker_cookbook", reason="tinker-cookbook is a test dependency (scripts/setup.sh installs it)")

import tinker  # noqa: E402

try:  # the server fixture (the SDK pointed at `cookbook serve` on a free port)
    from test_serve import server  # noqa: F401
except pytest.skip.Exception:  # pragma: no cover
    pass


@pytest.fixture(params=["in_process", "over_http"])
def service_client(request, default_model_ready):
    from cookbook_engine.backends.local import LocalServiceClient, get_worker

    get_worker(default_model_ready).call(lambda: None)
    if request.param == "in_process":
        request.getfixturevalue("home")
        service = LocalServiceClient()
    else:
        request.getfixturevalue("server")
        service = tinker.ServiceClient()
    yield service
    service.close() if isinstance(service, LocalServiceClient) else None


@pytest.mark.slow
def test_cookbooks_checkpoint_manager_rolls_and_reads_renderer_metadata_back(
    service_client, default_model_ready, tmp_path, monkeypatch
):
    from tinker_cookbook import checkpoint_utils

    from cookbook_engine import models

    metadata: dict[str, str] = {}
    checkpoint_utils.add_renderer_name_to_user_metadata(metadata, "qwen3_instruct")
    training = service_client.create_lora_training_client(
        default_model_ready, rank=4, train_unembed=False, user_metadata=metadata
    ).result()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the SDK's own get_tokenizer() loads from get_info's tokenizer_id
    assert training.get_tokenizer().encode("<|im_end|>") == models.load_tokenizer(default_model_ready).encode(
        "<|im_end|>"
    )
    manager = checkpoint_utils.CheckpointManager(
        training_client=training, service_client=service_client, log_path=str(tmp_path), rolling_save_every=1
    )
    for step in (1, 2, 3):
        manager.maybe_save(step, {"batch": step})
    final = manager.save_final({"batch": 3})
    records = checkpoint_utils.load_checkpoints_file(str(tmp_path))
    paths = [r.get(k) for r in records for k in ("state_path", "sampler_path") if r.has(k)]
    assert paths and all(p.startswith("tinker://") for p in paths), paths  # one path form, in process and over HTTP

    rest = service_client.create_rest_client()
    run = rest.get_training_run_by_tinker_path(final["state_path"]).result()
    names = sorted(c.checkpoint_id for c in rest.list_checkpoints(run.training_run_id).result().checkpoints)
    assert names == ["sampler_weights/final", "weights/final"]  # rolling 000001..000003 deleted, as the manager does
    assert checkpoint_utils.get_renderer_name_from_checkpoint(service_client, final["sampler_path"]) == "qwen3_instruct"
    assert run.user_metadata["renderer_name"] == "qwen3_instruct"
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == final["state_path"]

    listed = rest.list_user_checkpoints().result().checkpoints
    assert {final["state_path"], final["sampler_path"]} <= {c.tinker_path for c in listed}
    rest.set_checkpoint_ttl_from_tinker_path(final["sampler_path"], 3600).result()
    sampler = [
        c for c in rest.list_checkpoints(run.training_run_id).result().checkpoints if c.checkpoint_type == "sampler"
    ]
    assert sampler[0].expires_at is not None
    info = rest.get_weights_info_by_tinker_path(final["sampler_path"]).result()
    assert info.is_lora and info.lora_rank == 4
    # a new training client from the final state, and a sampler on the final weights, both by tinker:// path
    resumed = service_client.create_training_client_from_state_with_optimizer(final["state_path"]).result()
    assert resumed.get_info().lora_rank == 4
    assert service_client.create_sampling_client(model_path=final["sampler_path"]).result().get_base_model()
