"""The client Protocols the loops are typed with (backends/protocol.py) are the installed tinker SDK's surface, and
every backend offers that surface with the SDK's signatures. Generated from the installed `tinker` package and the
Protocols' own members; the only list of method names anywhere is compat.UNSUPPORTED (what the local backend
deliberately does not offer, with reasons). No model is loaded.

- every Protocol member is a public method of the SDK's class, not listed as unsupported, with the SDK's parameters
  (names, kinds, order, defaults), async where the SDK's is, and returning a future where the SDK's does;
- where the SDK pairs `name` with `name_async`, the Protocol declares both;
- every SDK client method the engine's code calls (read from its source) is declared;
- the local, clocked and hosted backends offer every Protocol member with the SDK's signature (no parameter
  swallowed by **kwargs), async where the SDK's is; mypy checks the same classes against the Protocols' types
  (each backend module's `_conforms`).
The SDK methods outside the Protocols are the local backend's too (tests/test_tinker_signatures.py)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import tinker
from test_tinker_signatures import signature_problems

from cookbook_engine.backends import compat, protocol
from cookbook_engine.backends.clocked import ClockedSamplingClient, ClockedServiceClient, ClockedTrainingClient
from cookbook_engine.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from cookbook_engine.backends.tinker import HostedSamplingClient, HostedServiceClient, HostedTrainingClient

SDK = {
    protocol.ServiceClient: tinker.ServiceClient,
    protocol.TrainingClient: tinker.TrainingClient,
    protocol.SamplingClient: tinker.SamplingClient,
}
BACKENDS = {
    protocol.ServiceClient: (LocalServiceClient, ClockedServiceClient, HostedServiceClient),
    protocol.TrainingClient: (LocalTrainingClient, ClockedTrainingClient, HostedTrainingClient),
    protocol.SamplingClient: (LocalSamplingClient, ClockedSamplingClient, HostedSamplingClient),
}


def declared_members(proto: type) -> list[str]:
    return sorted(name for name in vars(proto) if not name.startswith("_") and callable(vars(proto)[name]))


def sdk_methods(sdk: type) -> set[str]:
    return {
        name
        for name in dir(sdk)
        if not name.startswith("_")
        and callable(getattr(sdk, name))
        and not isinstance(inspect.getattr_static(sdk, name), property)
    }


def parameters(fn) -> list[tuple[str, inspect._ParameterKind, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def is_async(fn) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn))


def returns_future(fn) -> bool:
    """Whether the annotated return type is a future: the SDK's APIFuture, AwaitableConcurrentFuture and
    Backcompat*Future, the Protocols' ResultFuture (annotations are strings under `from __future__ import
    annotations`, in the SDK and here)."""
    return "Future" in str(inspect.signature(fn).return_annotation).split("[")[0]


ENGINE = Path(__file__).resolve().parent.parent / "cookbook_engine"
MEMBERS = [(proto, name) for proto in SDK for name in declared_members(proto)]
BACKEND_MEMBERS = [(proto, name, backend) for proto, name in MEMBERS for backend in BACKENDS[proto]]


@pytest.mark.parametrize("proto,name", MEMBERS, ids=[f"{p.__name__}.{n}" for p, n in MEMBERS])
def test_every_protocol_member_is_the_sdks_method_with_its_parameters(proto: type, name: str):
    sdk = SDK[proto]
    assert name in sdk_methods(sdk), f"{proto.__name__}.{name}: tinker {tinker.__version__} has no such method"
    assert f"{sdk.__name__}.{name}" not in compat.UNSUPPORTED, f"{name} is declared and listed as unsupported"
    ours, theirs = vars(proto)[name], getattr(sdk, name)
    assert parameters(ours) == parameters(theirs), f"{proto.__name__}.{name}: parameters differ from the SDK's"
    assert is_async(ours) == is_async(theirs), f"{proto.__name__}.{name}: async differs from the SDK's"
    assert returns_future(ours) == returns_future(theirs), (
        f"{proto.__name__}.{name} returns {inspect.signature(ours).return_annotation}, "
        f"the SDK's {inspect.signature(theirs).return_annotation}"
    )


@pytest.mark.parametrize("proto", list(SDK), ids=lambda p: p.__name__)
def test_the_protocols_declare_each_sdk_pair_whole(proto: type):
    declared, sdk = set(declared_members(proto)), sdk_methods(SDK[proto])
    for name in declared:
        twin = name.removesuffix("_async") if name.endswith("_async") else f"{name}_async"
        if twin in sdk:
            assert twin in declared, f"{proto.__name__} declares {name} but not its SDK twin {twin}"


def sdk_calls_in_engine() -> dict[str, set[str]]:
    """Each SDK client method name the engine calls (`x.name(...)`, read from its source outside backends/ and
    serve/, which implement the surface), with the files that call it. A name shared with other objects (`sample`
    of `random`, `close` of files) is counted too: it errs towards declaring more."""
    names = set().union(*(sdk_methods(sdk) for sdk in SDK.values()))
    calls: dict[str, set[str]] = {}
    for path in ENGINE.rglob("*.py"):
        if {"backends", "serve"} & set(path.relative_to(ENGINE).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
                calls.setdefault(node.func.attr, set()).add(str(path.relative_to(ENGINE)))
    return calls


def test_every_sdk_method_the_engine_calls_is_declared_in_the_protocols():
    declared = set().union(*(declared_members(proto) for proto in SDK))
    calls = sdk_calls_in_engine()
    assert {"forward_backward_async", "optim_step_async", "sample_async"} <= set(calls)  # the reader finds calls
    undeclared = {name: sorted(files) for name, files in calls.items() if name not in declared}
    assert not undeclared, f"the engine calls SDK methods the Protocols do not declare: {undeclared}"


@pytest.mark.parametrize(
    "proto,name,backend", BACKEND_MEMBERS, ids=[f"{b.__name__}.{n}" for _, n, b in BACKEND_MEMBERS]
)
def test_every_backend_offers_every_protocol_member_with_the_sdks_signature(proto: type, name: str, backend: type):
    method = getattr(backend, name, None)
    assert method is not None, f"{backend.__qualname__} has no {name}, which {proto.__name__} declares"
    theirs = getattr(SDK[proto], name)
    problems = signature_problems(theirs, method)
    variadic = [
        p.name for p in inspect.signature(method).parameters.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if variadic:
        problems.append(f"takes *{'/**'.join(variadic)}: it would swallow what it does not name")
    assert not problems, f"{backend.__qualname__}.{name}: " + "; ".join(problems)


def test_a_derived_async_twin_has_its_plain_methods_signature_and_is_a_coroutine_function():
    twin = LocalTrainingClient.forward_backward_async
    assert is_async(twin) and twin.__name__ == "forward_backward_async"
    assert inspect.signature(twin) == inspect.signature(LocalTrainingClient.forward_backward)
    assert is_async(LocalSamplingClient.sample_async)
    assert inspect.signature(LocalSamplingClient.sample_async) == inspect.signature(LocalSamplingClient.sample)
