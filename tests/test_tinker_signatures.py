"""Signature conformance with the installed tinker SDK, generated from it (no hand-kept method list): every public
method of tinker.ServiceClient, TrainingClient and SamplingClient is either implemented by the local backend with a
compatible signature (same parameter names, kinds, positional order and defaults, no extra required parameter, async
where the SDK's is async) or listed with a reason in compat.UNSUPPORTED, and then calling it raises
NotImplementedError with that reason. The RestClient stand-in is checked the same way for what it implements. No
model is loaded."""

from __future__ import annotations

import inspect

import pytest
import tinker

from cookbook_engine.backends import compat
from cookbook_engine.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from cookbook_engine.backends.rest import LocalRestClient

PAIRS = {
    "ServiceClient": (tinker.ServiceClient, LocalServiceClient),
    "TrainingClient": (tinker.TrainingClient, LocalTrainingClient),
    "SamplingClient": (tinker.SamplingClient, LocalSamplingClient),
}


def sdk_methods() -> list[tuple[str, str]]:
    return [
        (cls_name, name)
        for cls_name, (sdk, _) in PAIRS.items()
        for name in sorted(dir(sdk))
        if not name.startswith("_")
        and (callable(getattr(sdk, name, None)) or isinstance(inspect.getattr_static(sdk, name), property))
    ]


def signature_problems(sdk_fn, our_fn) -> list[str]:
    problems = []
    sdk_async = inspect.iscoroutinefunction(inspect.unwrap(sdk_fn))
    if sdk_async != inspect.iscoroutinefunction(inspect.unwrap(our_fn)):
        problems.append(f"the SDK's is {'async' if sdk_async else 'not async'}, ours is not")
    theirs, ours = inspect.signature(sdk_fn).parameters, inspect.signature(our_fn).parameters
    variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    for p in theirs.values():
        if p.kind in variadic:
            continue
        q = ours.get(p.name)
        if q is None:
            if not any(o.kind == inspect.Parameter.VAR_KEYWORD for o in ours.values()):
                problems.append(f"parameter {p.name!r} missing")
            continue
        if q.kind != p.kind:
            problems.append(f"parameter {p.name!r} is {q.kind.description}, the SDK's {p.kind.description}")
        if p.default is not p.empty and q.default != p.default:
            problems.append(f"parameter {p.name!r} defaults to {q.default!r}, the SDK's to {p.default!r}")
    problems += [
        f"extra required parameter {q.name!r}"
        for q in ours.values()
        if q.name not in theirs and q.default is q.empty and q.kind not in variadic
    ]
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    sdk_order = [p.name for p in theirs.values() if p.kind == positional]
    our_order = [q.name for q in ours.values() if q.kind == positional]
    if our_order[: len(sdk_order)] != sdk_order:
        problems.append(f"positional order {our_order}, the SDK's {sdk_order}")
    return problems


@pytest.mark.parametrize("cls_name,name", sdk_methods())
def test_every_sdk_method_is_implemented_compatibly_or_listed_as_unsupported(cls_name, name):
    sdk, ours = PAIRS[cls_name]
    key = f"{cls_name}.{name}"
    if key in compat.UNSUPPORTED:
        assert compat.UNSUPPORTED[key].strip(), f"{key}: listed without a reason"
        instance = object.__new__(ours)  # the listed methods raise before touching any state
        with pytest.raises(NotImplementedError, match=name):
            attribute = getattr(instance, name)
            if callable(attribute):
                required = [
                    p
                    for p in inspect.signature(getattr(sdk, name)).parameters.values()
                    if p.default is p.empty
                    and p.name != "self"
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
                result = attribute(*[None] * len(required))
                if inspect.iscoroutine(result):
                    import asyncio

                    asyncio.run(result)
        return
    assert hasattr(ours, name), f"{key} is neither implemented nor listed in compat.UNSUPPORTED"
    if isinstance(inspect.getattr_static(sdk, name), property):
        return
    problems = signature_problems(getattr(sdk, name), getattr(ours, name))
    assert not problems, f"{key}: " + "; ".join(problems)


def test_the_unsupported_table_names_only_methods_the_sdk_has():
    names = {f"{c}.{n}" for c, n in sdk_methods()}
    assert set(compat.UNSUPPORTED) <= names, sorted(set(compat.UNSUPPORTED) - names)


def test_the_rest_client_stand_in_matches_the_sdk_where_it_implements_and_refuses_the_rest():
    implemented = [n for n in vars(LocalRestClient) if not n.startswith("_")]
    assert {"list_checkpoints", "delete_checkpoint_from_tinker_path", "get_training_run_by_tinker_path"} <= set(
        implemented
    )
    for name in implemented:
        problems = signature_problems(getattr(tinker.RestClient, name), getattr(LocalRestClient, name))
        assert not problems, f"RestClient.{name}: " + "; ".join(problems)
    with pytest.raises(NotImplementedError, match="get_billing_usage"):
        LocalRestClient().get_billing_usage("2026-01-01", "2026-02-01")
