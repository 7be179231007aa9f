"""The studio's own SL, DPO and RL loops with `backend=tinker` against a real `cookbook serve`, compared with the
same runs on the local backend.

The test starts `cookbook serve` as a child process (the real command, with this test's studio home) and points
the hosted backend at it the way a user points it at any Tinker API server: TINKER_BASE_URL=its address,
TINKER_API_KEY=any `tml-` key (backends/tinker.py probes /api/v1/get_server_capabilities with the key in X-API-Key,
then builds `tinker.ServiceClient(api_key=..., base_url=...)`; serve accepts any key). Each loop then runs twice from
the CLI's configuration through RunManager, once `backend=local` in this process and once `backend=tinker` through
the SDK over HTTP, and every metric both runs log at every step must agree within float tolerance (rel 1e-4, abs
1e-5; timings excluded). The two sides compute on the same local backend code with the same seeds: LoRA
initialization (`seed` reaches the server in create_model), data order, and RL's sampling (each group's rollouts
are sampled with `SamplingParams.seed`, which the local sampler honours per request, so both sides draw the same
tokens from the same weights). What differs is the path: protobuf/JSON float32 tensors, the SDK's
`forward_backward_custom` (DPO's loss computed here in torch, its gradient sent back as cross-entropy weights) against
the local backend's own, the reference log-probs through a sampling session.

The learning rate is set: with learning_rate=auto the two backends choose differently by design
(training/learning_rate.py: the rates measured for built-in data apply to backend=local only; backend=tinker takes
the Tinker cookbook's formula, 1e-3 for the default model, where the measured SL rate on builtin:facts is 2e-3).
So is RL's `train_mlp` (auto puts LoRA on the MLP for hosted models, attention only for the measured local default)
and the precision: both sides run fp32 (`cookbook serve --dtype fp32`), since bf16 rounds the two paths apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

from cookbook_engine import config as cfg
from cookbook_engine.backends import tinker as hosted
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.rl.suggested import train_mlp_used
from cookbook_engine.runs import RunManager
from cookbook_engine.training.metric_names import KEY_METRIC
from storage import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from common import start_serve  # noqa: E402 (benchmarks/common.py: `cookbook serve` as a child process)
from test_serve import free_port  # noqa: E402

REL_TOL, ABS_TOL = 1e-4, 1e-5
TIMINGS = ("time/", "throughput", "tokens_per_s", "_seconds", "elapsed")


@pytest.fixture
def served(home, default_model_ready, monkeypatch):
    """`cookbook serve` on a free port, this test's home its studio home; the hosted backend pointed at it. Both
    sides compute in fp32: in bf16 the packed training pass and the served one round apart by more than these
    tolerances (DPO's step-0 accuracy flips on a tied pair), which would hide the wire's own errors."""
    port = free_port()
    server = start_serve(port, "--dtype", "fp32")
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TINKER_API_KEY", "tml-any-key-works-here")
    hosted.forget_probe()
    yield f"http://127.0.0.1:{port}"
    hosted.forget_probe()
    server.terminate()
    server.wait(30)


def run_both(config) -> tuple[dict, dict]:
    """The same configuration on the local backend and through the hosted backend; each run's metrics by step."""
    manager, store = RunManager(), Store.default()
    metrics = []
    # train_mlp=auto resolves by backend (RL on the local default model: attention only, as measured; a hosted
    # model: the MLP too), so both sides get the local side's resolution; lora_a=auto fixes A on the local backend
    # only (the SDK has no call for it), so both sides train A; dtype: serve's, for tinker
    config = dataclasses.replace(config, dtype="fp32", train_mlp=train_mlp_used(config))
    if hasattr(config, "lora_a"):
        config = dataclasses.replace(config, lora_a="trained")
    for backend in ("local", "tinker"):
        run_id = manager.start(dataclasses.replace(config, backend=backend))
        run = manager.wait(run_id, timeout=900)
        assert run["status"] == "completed", (backend, run.get("traceback"))
        metrics.append(by_step(store.get_metrics(run_id)))
    return metrics[0], metrics[1]


def by_step(frame) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for step, name, value in frame.itertuples(index=False):
        if not any(part in name for part in TIMINGS) and value is not None and not math.isnan(value):
            steps.setdefault(int(step), {})[name] = float(value)
    return steps


def differences(local: dict, remote: dict) -> tuple[float, float, list[str]]:
    """The largest absolute and relative differences over every (step, metric), and those outside the tolerance."""
    assert local.keys() == remote.keys(), (sorted(local), sorted(remote))
    largest_abs, largest_rel, outside = 0.0, 0.0, []
    for step in local:
        assert local[step].keys() == remote[step].keys(), (step, sorted(local[step]), sorted(remote[step]))
        for name, value in local[step].items():
            other = remote[step][name]
            largest_abs = max(largest_abs, abs(value - other))
            largest_rel = max(largest_rel, abs(value - other) / max(abs(value), 1e-12))
            if not math.isclose(value, other, rel_tol=REL_TOL, abs_tol=ABS_TOL):
                outside.append(f"step {step} {name}: local {value!r} vs hosted {other!r}")
    return largest_abs, largest_rel, outside


def check(config) -> list[str]:
    local, remote = run_both(config)
    largest_abs, largest_rel, outside = differences(local, remote)
    names = sorted({name for values in local.values() for name in values})
    print(
        f"{type(config).__name__}: {sum(map(len, local.values()))} values over {len(local)} steps; largest difference "
        f"abs {largest_abs:.3g}, rel {largest_rel:.3g}; metrics {names}"
    )
    assert not outside, outside
    assert KEY_METRIC[config.kind] in names, names  # the run's key metric is among those compared
    return names


SHORT = {"lora_rank": 8, "save_every": 0, "eval_every": 0}  # short runs: a final evaluation and checkpoint only


@pytest.mark.slow
def test_sl_through_the_hosted_backend_against_serve_matches_the_local_backend(served):
    check(cfg.SLConfig(max_steps=3, batch_size=2, max_length=128, learning_rate=2e-3, **SHORT))


@pytest.mark.slow
def test_dpo_through_the_hosted_backend_against_serve_matches_the_local_backend(served):
    check(cfg.DPOConfig(max_steps=3, batch_size=2, max_length=128, learning_rate=5e-4, **SHORT))


@pytest.mark.slow
def test_rl_through_the_hosted_backend_against_serve_matches_the_local_backend(served):
    rl = {"groups_per_batch": 2, "group_size": 4, "max_tokens": 16, "num_eval_problems": 4}
    check(cfg.RLConfig(max_steps=2, learning_rate=1e-3, **rl, **SHORT))


# Issue 25's paradigms through the same path: a mix of envs with a multi-turn one, a mix of datasets, prompt
# distillation (its teacher samples with the context, then SL).


@pytest.mark.slow
def test_an_rl_mix_with_the_multi_turn_calculator_through_the_hosted_backend_matches_the_local_backend(served):
    rl = {"groups_per_batch": 2, "group_size": 4, "max_tokens": 16, "num_eval_problems": 4, "max_turns": 2}
    check(cfg.RLConfig(env="arithmetic:1,calculator:1", max_steps=2, learning_rate=1e-3, **rl, **SHORT))


@pytest.mark.slow
def test_an_sl_mix_of_datasets_through_the_hosted_backend_matches_the_local_backend(served):
    mix = "builtin:facts:1,builtin:persona:1"
    check(cfg.SLConfig(dataset=mix, max_steps=3, batch_size=2, max_length=128, learning_rate=2e-3, **SHORT))


@pytest.mark.slow
def test_prompt_distillation_through_the_hosted_backend_matches_the_local_backend(served):
    distill = {"group_size": 2, "groups_per_batch": 2, "max_tokens": 16, "max_length": 256}
    config = cfg.DistillConfig(mode="prompt", teacher="base", context="builtin:pip", dataset="builtin:persona")
    check(dataclasses.replace(config, max_steps=2, learning_rate=1e-3, **distill, **SHORT))


@pytest.mark.slow
def test_on_policy_distillation_through_the_hosted_backend_matches_the_local_backend(served):
    """The teacher is a checkpoint both sides name by its tinker:// path (serve's home is this test's home)."""
    from cookbook_engine.backends import compat

    manager, store = RunManager(), Store.default()
    teacher_run = manager.start(cfg.SLConfig(max_steps=1, batch_size=2, max_length=128, learning_rate=2e-3, **SHORT))
    assert manager.wait(teacher_run, timeout=900)["status"] == "completed"
    sampler = next(row["sampler_path"] for row in store.list_checkpoints(teacher_run) if row["sampler_path"])
    teacher = compat.to_tinker_path(sampler)
    assert teacher and teacher.startswith("tinker://"), sampler
    distill = {"group_size": 2, "groups_per_batch": 2, "max_tokens": 8, "max_length": 256}
    config = cfg.DistillConfig(teacher=teacher, dataset="builtin:sums", max_steps=2, learning_rate=1e-3)
    check(dataclasses.replace(config, **distill, **SHORT))


@pytest.mark.slow
def test_rl_with_a_kl_penalty_through_the_hosted_backend_matches_the_local_backend(served):
    rl = {"groups_per_batch": 2, "group_size": 4, "max_tokens": 16, "num_eval_problems": 4, "kl_penalty_coef": 0.1}
    check(cfg.RLConfig(max_steps=2, learning_rate=1e-3, **rl, **SHORT))


@pytest.mark.slow
def test_sl_with_an_anchor_through_the_hosted_backend_matches_the_local_backend(served, tmp_path):
    """The anchor through the SDK over HTTP: the base model's top-K prompt log-probs (sample) and cross_entropy with
    (N, K) targets, against cookbook serve: anchor/kl and the loss step for step as on the local backend."""
    chats = tmp_path / "anchor.jsonl"
    chats.write_text("".join(json.dumps(row) + "\n" for row in builtin_data.replay_rows()[:6]))
    config = cfg.SLConfig(max_steps=3, batch_size=2, max_length=128, learning_rate=2e-3, **SHORT)
    config.anchor = cfg.AnchorConfig(dataset=str(chats), rows=2, coef=1.0)
    assert "anchor/kl" in check(config)
