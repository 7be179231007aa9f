"""The client Protocols the loops are typed with (backends/protocol.py) describe what every backend really offers:
each member they declare, the `*_async` calls the loops make included, exists on the installed tinker SDK's clients,
the local backend's and the clocked simulator's, and is async exactly where the Protocol's is. Generated from the
Protocols' own members, not a hand-kept list. No model is loaded."""

from __future__ import annotations

import inspect

import pytest
import tinker

from cookbook_engine.backends import protocol
from cookbook_engine.backends.clocked import ClockedSamplingClient, ClockedServiceClient, ClockedTrainingClient
from cookbook_engine.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient

IMPLEMENTATIONS = {
    protocol.ServiceClient: (tinker.ServiceClient, LocalServiceClient, ClockedServiceClient),
    protocol.TrainingClient: (tinker.TrainingClient, LocalTrainingClient, ClockedTrainingClient),
    protocol.SamplingClient: (tinker.SamplingClient, LocalSamplingClient, ClockedSamplingClient),
}


def declared_members(proto: type) -> list[str]:
    return sorted(name for name in vars(proto) if not name.startswith("_") and callable(vars(proto)[name]))


MEMBERS = [(proto, name) for proto in IMPLEMENTATIONS for name in declared_members(proto)]


def test_the_protocols_declare_the_async_calls_the_loops_make():
    training = declared_members(protocol.TrainingClient)
    for name in (
        "forward_async",
        "forward_backward_async",
        "forward_backward_custom_async",
        "optim_step_async",
        "save_state_async",
        "save_weights_for_sampler_async",
        "save_weights_and_get_sampling_client_async",
    ):
        assert name in training
    assert {"sample_async", "compute_logprobs_async"} <= set(declared_members(protocol.SamplingClient))


@pytest.mark.parametrize("proto,name", MEMBERS, ids=[f"{p.__name__}.{n}" for p, n in MEMBERS])
def test_every_protocol_member_exists_on_the_sdk_and_local_clients_and_is_async_where_declared(proto: type, name: str):
    wanted_async = inspect.iscoroutinefunction(vars(proto)[name])
    for implementation in IMPLEMENTATIONS[proto]:
        method = getattr(implementation, name, None)
        assert method is not None, f"{implementation.__qualname__} has no {name}, which {proto.__name__} declares"
        assert inspect.iscoroutinefunction(inspect.unwrap(method)) == wanted_async, (
            f"{implementation.__qualname__}.{name} is {'not ' if wanted_async else ''}async, unlike {proto.__name__}'s"
        )


@pytest.mark.parametrize("proto", list(IMPLEMENTATIONS), ids=lambda p: p.__name__)
def test_every_parameter_the_protocols_name_is_accepted_by_that_name(proto: type):
    for name in declared_members(proto):
        declared = [
            p.name
            for p in inspect.signature(vars(proto)[name]).parameters.values()
            if p.name != "self" and p.kind != p.POSITIONAL_ONLY
        ]  # by-position ones: any name will do
        for implementation in IMPLEMENTATIONS[proto]:
            parameters = inspect.signature(getattr(implementation, name)).parameters
            takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
            missing = [p for p in declared if p not in parameters and not takes_any]
            assert not missing, f"{implementation.__qualname__}.{name} lacks {missing}"
