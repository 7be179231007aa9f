"""Both await styles of every client method, in process (LocalServiceClient) and over HTTP (the tinker SDK against
`cookbook serve`). The method list is generated from the installed SDK: every public method of ServiceClient,
TrainingClient and SamplingClient that has an `*_async` twin (and is not listed in compat.UNSUPPORTED) is called as
`await client.method(...)` (the SDK 0.38 style: the plain method's future awaited) and as
`await client.method_async(...)` (the deprecated style, whose result is awaited again when it is a future); both
give a result of the same type. A method the SDK adds without a call written here fails the first test."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
import tinker
from tinker import types

from cookbook_engine.backends import compat

try:  # the server fixture (the SDK pointed at `cookbook serve` on a free port)
    from test_serve import server  # noqa: F401
except pytest.skip.Exception:  # pragma: no cover
    pass

CLASSES = {"service": tinker.ServiceClient, "training": tinker.TrainingClient, "sampling": tinker.SamplingClient}
SDK_NAMES = {"service": "ServiceClient", "training": "TrainingClient", "sampling": "SamplingClient"}


def paired_methods() -> list[tuple[str, str]]:
    """(client, method) for every public SDK method with an `_async` twin that the local backend offers."""
    return [
        (role, name)
        for role, cls in CLASSES.items()
        for name in sorted(dir(cls))
        if not name.startswith("_")
        and not name.endswith("_async")
        and callable(getattr(cls, name))
        and hasattr(cls, f"{name}_async")
        and f"{SDK_NAMES[role]}.{name}" not in compat.UNSUPPORTED
    ]


def datum() -> types.Datum:
    tokens = [1, 9690, 314, 253, 1345, 30, 2]
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]},
    )


def custom_loss(data, logprobs_list):
    loss = -sum(lp.sum() for lp in logprobs_list)
    return loss, {"custom:sum": float(loss)}


PROMPT = types.ModelInput.from_ints([1, 9690, 314, 253])
GREEDY = types.SamplingParams(max_tokens=2, temperature=0.0)


def calls(model: str, state_path: str, sampler_path: str) -> dict[tuple[str, str], tuple[tuple, dict]]:
    """The arguments each paired method is called with (both styles get the same)."""
    adam = types.AdamParams(learning_rate=1e-4)
    return {
        ("service", "create_lora_training_client"): ((model,), {"rank": 4, "train_unembed": False}),
        ("service", "create_sampling_client"): ((), {"base_model": model}),
        ("service", "create_training_client_from_state"): ((state_path,), {}),
        ("service", "create_training_client_from_state_with_optimizer"): ((state_path,), {}),
        ("service", "get_server_capabilities"): ((), {}),
        ("training", "create_sampling_client"): ((sampler_path,), {}),
        ("training", "forward"): (([datum()], "cross_entropy"), {}),
        ("training", "forward_backward"): (([datum()], "cross_entropy"), {}),
        ("training", "forward_backward_custom"): (([datum()], custom_loss), {}),
        ("training", "get_info"): ((), {}),
        ("training", "load_state"): ((state_path,), {}),
        ("training", "load_state_with_optimizer"): ((state_path,), {}),
        ("training", "optim_step"): ((adam,), {}),
        ("training", "save_state"): (("await-style",), {"overwrite": True}),  # called twice: once per style
        ("training", "save_weights_and_get_sampling_client"): ((), {}),
        ("training", "save_weights_for_sampler"): (("await-style",), {}),
        ("sampling", "compute_logprobs"): ((PROMPT,), {}),
        ("sampling", "get_base_model"): ((), {}),
        ("sampling", "sample"): ((PROMPT, 1, GREEDY), {}),
    }


def test_every_paired_sdk_method_has_a_call_written_here():
    written = set(calls("m", "s", "p"))
    missing = [f"{SDK_NAMES[role]}.{name}" for role, name in paired_methods() if (role, name) not in written]
    assert not missing, f"the SDK has methods with an _async twin that this test does not call: {missing}"


async def settle(value: Any) -> Any:
    """A value, after awaiting it while it is awaitable (a future, or a future of a future)."""
    while inspect.isawaitable(value):
        value = await value
    return value


async def both_styles(clients: dict[str, Any], table: dict) -> dict[str, tuple[str, str]]:
    results = {}
    for role, name in paired_methods():
        args, kwargs = table[(role, name)]
        client = clients[role]
        plain = await settle(getattr(client, name)(*args, **kwargs))  # `await client.method(...)`
        deprecated = await settle(getattr(client, f"{name}_async")(*args, **kwargs))  # `await client.method_async()`
        results[f"{role}.{name}"] = (type(plain).__name__, type(deprecated).__name__)
    return results


@pytest.fixture(params=["in_process", "over_http"])
def service_client(request, default_model_ready):
    from cookbook_engine.backends.local import LocalServiceClient, get_worker

    get_worker(default_model_ready).call(lambda: None)
    if request.param == "in_process":
        request.getfixturevalue("home")
        return LocalServiceClient()
    request.getfixturevalue("server")
    return tinker.ServiceClient()


@pytest.mark.slow
def test_both_await_styles_of_every_method_give_the_same_kind_of_result(service_client, default_model_ready):
    training = service_client.create_lora_training_client(default_model_ready, rank=4, train_unembed=False).result()
    state_path = training.save_state("start").result().path
    sampler_path = training.save_weights_for_sampler("start").result().path
    sampling = service_client.create_sampling_client(base_model=default_model_ready).result()
    clients = {"service": service_client, "training": training, "sampling": sampling}
    results = asyncio.run(both_styles(clients, calls(default_model_ready, state_path, sampler_path)))
    assert len(results) == len(paired_methods()) >= 19
    differ = {name: kinds for name, kinds in results.items() if kinds[0] != kinds[1]}
    assert not differ, differ
    assert results["training.forward_backward"][0] == "ForwardBackwardOutput"
    assert results["sampling.sample"][0] == "SampleResponse"
