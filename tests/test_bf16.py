"""bf16 compute checked against fp32, not assumed: the same LoRA SFT run (same data, same initial adapter) in both
dtypes, its per-step losses within BF16_LOSS_TOLERANCE; the per-token log-probabilities DPO and RL use (through
compute_logprobs and a forward pass) within BF16_LOGPROB_TOLERANCE on average, and each sequence's summed
log-probability (DPO's implicit reward) within BF16_SEQUENCE_TOLERANCE; greedy tokens equal to fp32's for at least
the first BF16_GREEDY_PREFIX tokens. Also: LoRA weights and their AdamW state stay fp32 when the base is bf16.

bf16 here is mixed precision (fast_ops.install_frozen_linears): bf16 base weights and matmuls, fp32 activations,
LoRA delta, residual stream and LM head. The tolerances come from measurement, on an AMD EPYC with 2 cores and no
AMX or AVX-512 BF16 (bf16 emulated), loaded by one other test run, 2026-11-25, with this file's `_run` (4 chats of
43-45 tokens, LoRA rank 8, 5 Adam steps at lr 5e-4):
- losses fp32 [46.53, 26.64, 15.56, 8.87, 4.39], bf16 [46.18, 26.46, 15.55, 8.91, 4.38] in one run and
  [46.18, 26.61, 15.62, 8.87, 4.33] in another (bf16 varies a little from run to run, fp32 does not): at most 1.4%
  apart per step (tolerance 5%);
- per-token log-prob mean absolute difference after training 0.038-0.050 nats (tolerance 0.1); before training it is
  0.032-0.039 (0.053-0.065 with the bf16 residual stream), of which 0.013-0.015 comes from rounding the weights to
  bf16 alone;
- summed log-probability per sequence 0.6-0.8% apart (tolerance 2%); greedy tokens: all 8 equal (checked: 4).
With the delta added to a bf16 base output and rounded back to bf16 (peft's own bf16 forward, before the fix) the
same run measured losses 21-33% above fp32's from the second step on, 0.24-0.28 nats per token and 4.2-4.6% per
sequence: each of those fails the tolerances above. STEPS is 5, not the 20 the issue names, to keep this slow test
short where bf16 is emulated (~160 s for the bf16 run on that CPU); on CPUs with bf16 units and on GPUs it takes
seconds. The same run continued once (not in CI) for 19 steps stayed within 2.2% per step over steps 1-10 (losses
down to 0.1) and within 4.4% over steps 11-19, whose losses are 0.03-0.07 nats summed over the 4 chats.
"""

from __future__ import annotations

import pytest
import torch
from tinker import types

from cookbook_engine import models
from cookbook_engine.backends.local import LocalServiceClient
from cookbook_engine.renderers import get_renderer
from cookbook_engine.training.common import datum_from_tokens

pytestmark = pytest.mark.slow

STEPS = 5
BF16_LOSS_TOLERANCE = 0.05  # relative, per step (measured at most 0.014; 0.21-0.33 without mixed precision)
BF16_LOGPROB_TOLERANCE = 0.1  # nats, mean absolute difference per token (measured 0.038-0.050; 0.24-0.28 without)
BF16_SEQUENCE_TOLERANCE = 0.02  # relative, per sequence's summed log-probability (measured 0.006-0.008; 0.042-0.046)
BF16_GREEDY_PREFIX = 4  # measured: all 8 greedy tokens equal

CHATS = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("Name a colour of the sky.", "The sky is often blue."),
    ("What is two plus three?", "Two plus three is five."),
    ("Say hello politely.", "Hello, it is a pleasure to meet you."),
]


@pytest.fixture(scope="module")
def data(default_model_ready):
    renderer = get_renderer("auto", models.load_tokenizer(models.DEFAULT_MODEL))
    return [
        datum_from_tokens(
            *renderer.build_supervised_example([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        )
        for q, a in CHATS
    ]


def _run(dtype: str, data) -> dict:
    service = LocalServiceClient(device="cpu", dtype=dtype)
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=7).result()
    losses = []
    for _ in range(STEPS):
        out = client.forward_backward(data, "cross_entropy").result()
        losses.append(out.metrics["loss:sum"])
        client.optim_step(types.AdamParams(learning_rate=5e-4)).result()
    forward = client.forward(data, "cross_entropy").result()
    sampler = client.save_weights_and_get_sampling_client().result()
    worker = client._worker

    def dtypes():
        params = worker.adapter_params(client.adapter)
        optimizer = client._ensure_optimizer()
        states = [t for p in params for t in optimizer.state[p].values() if torch.is_tensor(t) and t.numel() > 1]
        base = next(p for n, p in worker.model.named_parameters() if "lora" not in n)
        return {p.dtype for p in params}, {t.dtype for t in states}, base.dtype

    result = {
        "losses": losses,
        "logprobs": [o["logprobs"].to_torch() for o in forward.loss_fn_outputs],
        "compute_logprobs": [torch.tensor(sampler.compute_logprobs(d.model_input).result()[1:]) for d in data],
        "greedy": sampler.sample(data[0].model_input, 1, types.SamplingParams(max_tokens=8, temperature=0, stop=[]))
        .result()
        .sequences[0]
        .tokens,
        "dtypes": worker.call(dtypes),
    }
    client.close()
    return result


@pytest.fixture(scope="module")
def runs(data):
    return {dtype: _run(dtype, data) for dtype in ("fp32", "bf16")}


def test_bf16_keeps_lora_weights_and_optimizer_state_in_fp32(runs):
    lora, states, base = runs["bf16"]["dtypes"]
    assert lora == {torch.float32} and states == {torch.float32} and base == torch.bfloat16
    assert runs["fp32"]["dtypes"][2] == torch.float32


def test_bf16_sft_losses_follow_fp32_step_by_step(runs):
    fp32, bf16 = runs["fp32"]["losses"], runs["bf16"]["losses"]
    print("losses fp32", fp32, "bf16", bf16)
    assert bf16 == pytest.approx(fp32, rel=BF16_LOSS_TOLERANCE), (fp32, bf16)
    assert bf16[-1] < bf16[0]  # and it learns


def test_bf16_logprobs_for_dpo_and_rl_are_bounded(runs):
    for key in ("logprobs", "compute_logprobs"):
        for ours, reference in zip(runs["bf16"][key], runs["fp32"][key]):
            difference = float((ours - reference).abs().mean())
            print(f"{key}: |bf16 - fp32| {difference:.4f} nats a token, sums {ours.sum():.2f} {reference.sum():.2f}")
            assert difference < BF16_LOGPROB_TOLERANCE
            assert float(ours.sum()) == pytest.approx(float(reference.sum()), rel=BF16_SEQUENCE_TOLERANCE)


def test_bf16_greedy_tokens_start_as_fp32s(runs):
    bf16, fp32 = runs["bf16"]["greedy"], runs["fp32"]["greedy"]
    assert bf16[:BF16_GREEDY_PREFIX] == fp32[:BF16_GREEDY_PREFIX], (bf16, fp32)
