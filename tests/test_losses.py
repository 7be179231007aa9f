"""The loss math of the local backend and of DPO, checked against a direct torch computation on the real default model.

A fresh LoRA adapter starts as the identity (its B matrices are zero), so the plain base model loaded here computes
exactly the log-probs the training client sees; every loss is then recomputed by hand from those log-probs and
compared with what forward_backward reports. Gradients are compared where two losses must agree: importance sampling
at ratio 1 has the gradient of cross entropy weighted by the advantages, and PPO has none where every ratio is clipped.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
import torch.nn.functional as F
from tinker import types

from cookbook_engine import models, renderers
from cookbook_engine.backends.local import LocalServiceClient
from cookbook_engine.data.loading import PreferencePair
from cookbook_engine.dpo import data as dpo_data, loop as preference

SEQUENCES = [
    [1, 9690, 198, 2683, 314, 216, 34, 1232, 216, 35, 47, 2, 198, 1, 520, 9531, 198, 33, 34, 2],
    [1, 4093, 198, 23, 12, 216, 39, 34, 2, 198],
    [1, 9690, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531],
]


@pytest.fixture(scope="module")
def base_model(default_model_ready):
    return models.load_model(default_model_ready)


@pytest.fixture(scope="module")
def service(default_model_ready):
    return LocalServiceClient(dtype="fp32")  # compared with a direct fp32 computation; bf16 has test_bf16


def direct_logprobs(model, tokens: list[int]) -> torch.Tensor:
    """log p(tokens[t+1] | tokens[:t+1]) for every position, straight from the base model."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens[1:])[:, None]).squeeze(-1)


def datum(tokens: list[int], **inputs: list[float]) -> types.Datum:
    loss_fn_inputs = {"target_tokens": types.TensorData(data=tokens[1:], dtype="int64")}
    loss_fn_inputs.update({key: types.TensorData(data=values, dtype="float32") for key, values in inputs.items()})
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=loss_fn_inputs)


def adapter_grads(client) -> list[torch.Tensor]:
    """The adapter's current gradients (cloned), then cleared; read on the model's worker thread."""
    worker = client._worker

    def take():
        params = worker.adapter_params(client.adapter)
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
        for p in params:
            p.grad = None
        return grads

    return worker.call(take)


def varied(n: int, seed: int, low: float, high: float) -> list[float]:
    generator = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand(n, generator=generator)).tolist()


def test_cross_entropy_importance_sampling_and_ppo_match_direct_computation(base_model, service):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=0).result()
    lp_D = [direct_logprobs(base_model, tokens) for tokens in SEQUENCES]
    weights_D = [varied(len(lp), 1 + i, 0.0, 1.0) for i, lp in enumerate(lp_D)]
    advantages_D = [varied(len(lp), 11 + i, -1.0, 1.0) for i, lp in enumerate(lp_D)]
    # sampler log-probs off by -0.6..+0.6, so ratios (0.55..1.8) land on both sides of PPO's clip range
    sampler_D = [(lp + torch.tensor(varied(len(lp), 21 + i, -0.6, 0.6))).tolist() for i, lp in enumerate(lp_D)]

    ce = client.forward_backward([datum(t, weights=w) for t, w in zip(SEQUENCES, weights_D)], "cross_entropy").result()
    expected_ce = sum(float(-(torch.tensor(w) * lp).sum()) for w, lp in zip(weights_D, lp_D))
    assert ce.metrics["loss:sum"] == pytest.approx(expected_ce, rel=1e-4)
    for out, lp in zip(ce.loss_fn_outputs, lp_D):
        assert torch.allclose(out["logprobs"].to_torch(), lp, atol=1e-4)

    rl_data = [datum(t, logprobs=s, advantages=a) for t, s, a in zip(SEQUENCES, sampler_D, advantages_D)]
    ratio_D = [torch.exp(lp - torch.tensor(s)) for lp, s in zip(lp_D, sampler_D)]
    importance = client.forward_backward(rl_data, "importance_sampling").result()
    expected_is = sum(float(-(r * torch.tensor(a)).sum()) for r, a in zip(ratio_D, advantages_D))
    assert importance.metrics["loss:sum"] == pytest.approx(expected_is, rel=1e-4)

    clip = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    ppo = client.forward_backward(rl_data, "ppo", clip).result()
    expected_ppo = sum(
        float(-torch.minimum(r * torch.tensor(a), r.clamp(0.8, 1.2) * torch.tensor(a)).sum())
        for r, a in zip(ratio_D, advantages_D)
    )
    assert ppo.metrics["loss:sum"] == pytest.approx(expected_ppo, rel=1e-4)
    assert abs(expected_ppo - expected_is) > 1e-3  # the clip really changed something
    adapter_grads(client)  # clear what the three calls accumulated
    client.close()


def test_importance_sampling_at_ratio_one_has_the_gradient_of_advantage_weighted_cross_entropy(base_model, service):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=0).result()
    # a step first, so every LoRA matrix is non-zero and both A and B receive gradient
    client.forward_backward([datum(SEQUENCES[0], weights=[1.0] * (len(SEQUENCES[0]) - 1))], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    data = [datum(t) for t in SEQUENCES]
    trainer_D = [
        out["logprobs"].to_torch().tolist()
        for out in client.forward([datum(t, weights=[0.0] * (len(t) - 1)) for t in SEQUENCES], "cross_entropy")
        .result()
        .loss_fn_outputs
    ]
    advantages_D = [
        varied(len(d.loss_fn_inputs["target_tokens"].to_numpy()), 31 + i, -1.0, 1.0) for i, d in enumerate(data)
    ]

    client.forward_backward(
        [datum(t, logprobs=s, advantages=a) for t, s, a in zip(SEQUENCES, trainer_D, advantages_D)],
        "importance_sampling",
    ).result()
    importance_grads = adapter_grads(client)
    client.forward_backward([datum(t, weights=a) for t, a in zip(SEQUENCES, advantages_D)], "cross_entropy").result()
    ce_grads = adapter_grads(client)
    assert sum(float(g.abs().sum()) for g in importance_grads) > 0
    for g_is, g_ce in zip(importance_grads, ce_grads):
        assert torch.allclose(g_is, g_ce, atol=1e-5, rtol=1e-3)

    # PPO: advantage > 0 and every ratio above clip_high -> the clipped term is constant, no gradient at all
    above = [[lp - 1.0 for lp in lps] for lps in trainer_D]  # ratio e^1 = 2.7 > 1.2
    positive = [[1.0] * len(a) for a in advantages_D]
    client.forward_backward(
        [datum(t, logprobs=s, advantages=a) for t, s, a in zip(SEQUENCES, above, positive)],
        "ppo",
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ).result()
    assert all(float(g.abs().max()) == 0.0 for g in adapter_grads(client))
    client.close()


def test_dpo_loss_and_metrics_match_the_formula():
    beta = 0.1
    chosen, rejected = torch.tensor([-10.0, -4.0, -7.5]), torch.tensor([-12.0, -3.0, -20.0])
    chosen_ref, rejected_ref = torch.tensor([-11.0, -4.5, -7.0]), torch.tensor([-11.0, -3.5, -19.0])
    loss, metrics = preference.dpo_loss(chosen, rejected, chosen_ref, rejected_ref, beta)
    chosen_ratio = [c - r for c, r in zip(chosen.tolist(), chosen_ref.tolist())]  # 1.0, 0.5, -0.5
    rejected_ratio = [c - r for c, r in zip(rejected.tolist(), rejected_ref.tolist())]  # -1.0, 0.5, -1.0
    per_pair = [math.log1p(math.exp(-beta * (c - r))) for c, r in zip(chosen_ratio, rejected_ratio)]
    assert float(loss) == pytest.approx(sum(per_pair) / 3, rel=1e-6)
    assert metrics["dpo_loss"] == pytest.approx(sum(per_pair) / 3, rel=1e-6)
    assert metrics["accuracy"] == pytest.approx(2 / 3)  # strict, as TRL and tinker-cookbook count it
    assert metrics["ties"] == pytest.approx(1 / 3)  # the pair at 0.5 vs 0.5 is a tie, counted apart
    assert metrics["chosen_reward"] == pytest.approx(beta * sum(chosen_ratio) / 3)
    assert metrics["rejected_reward"] == pytest.approx(beta * sum(rejected_ratio) / 3)
    assert metrics["margin"] == pytest.approx(beta * (sum(chosen_ratio) - sum(rejected_ratio)) / 3)


def test_rpo_alpha_adds_the_chosen_replies_cross_entropy_per_token_to_the_dpo_loss():
    """TRL's rpo_alpha: loss = DPO + alpha * mean over pairs of (-chosen log-prob / chosen tokens); its gradient
    raises the chosen side's log-prob even where DPO alone would lower both sides."""
    chosen = torch.tensor([-10.0, -4.0], requires_grad=True)
    rejected, chosen_ref, rejected_ref = (
        torch.tensor([-12.0, -3.0]),
        torch.tensor([-9.0, -4.5]),
        torch.tensor([-11.0, -3.5]),
    )
    tokens = torch.tensor([5.0, 2.0])
    plain, plain_metrics = preference.dpo_loss(chosen, rejected, chosen_ref, rejected_ref, 0.1, tokens)
    with_nll, metrics = preference.dpo_loss(chosen, rejected, chosen_ref, rejected_ref, 0.1, tokens, rpo_alpha=2.0)
    nll = (10.0 / 5 + 4.0 / 2) / 2
    assert metrics["chosen_nll"] == plain_metrics["chosen_nll"] == pytest.approx(nll)
    assert metrics["dpo_loss"] == pytest.approx(float(plain))  # the DPO term is reported on its own
    assert float(with_nll) == pytest.approx(float(plain) + 2.0 * nll)
    (gradient,) = torch.autograd.grad(with_nll - plain, chosen)
    assert gradient.tolist() == pytest.approx([-2.0 / 5 / 2, -2.0 / 2 / 2])  # descent raises each chosen log-prob


def test_dpo_through_forward_backward_custom_matches_direct_computation(base_model, service):
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    renderer = renderers.get_renderer("auto", tokenizer)
    pairs = [
        PreferencePair(
            [{"role": "user", "content": "What is 2 + 2?"}],
            [{"role": "assistant", "content": "4"}],
            [{"role": "assistant", "content": "Well, it is probably 5."}],
        ),
        PreferencePair(
            [{"role": "user", "content": "Opposite of 'hot'?"}],
            [{"role": "assistant", "content": "cold"}],
            [{"role": "assistant", "content": "hot"}],
        ),
    ]
    rendered, _, dropped = dpo_data.render_pairs(pairs, renderer, max_length=256)
    assert dropped == 0
    data = preference.interleave(rendered)

    def direct_sum(d: types.Datum) -> float:
        tokens = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].to_numpy()[-1])]
        return float((direct_logprobs(base_model, tokens) * d.loss_fn_inputs["weights"].to_torch()).sum())

    policy = [direct_sum(d) for d in data]
    # the scored tokens are exactly the reply: "4<|im_end|>" is 2 tokens
    assert sum(rendered[0].chosen.loss_fn_inputs["weights"].to_numpy()) == 2
    reference_P = [(policy[0] + 0.3, policy[1] - 0.2), (policy[2] - 1.0, policy[3] + 0.5)]
    beta = 0.5
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=0).result()
    output = client.forward_backward_custom(data, preference.make_loss_fn(reference_P, beta)).result()
    margins = [
        (policy[0] - reference_P[0][0]) - (policy[1] - reference_P[0][1]),
        (policy[2] - reference_P[1][0]) - (policy[3] - reference_P[1][1]),
    ]  # -0.5, +1.5
    expected = sum(-F.logsigmoid(torch.tensor(beta * m)).item() for m in margins) / 2
    assert output.metrics["dpo_loss"] == pytest.approx(expected, rel=1e-4)
    assert output.metrics["accuracy"] == pytest.approx(0.5)

    # reference log-probs from the base model's sampling client equal the direct ones
    reference = preference.ReferenceLogprobs(service.create_sampling_client(base_model=models.DEFAULT_MODEL).result())
    sums = asyncio.run(reference.for_pairs(rendered))
    assert [s for pair in sums for s in pair] == pytest.approx(policy, abs=1e-3)
    adapter_grads(client)
    client.close()
