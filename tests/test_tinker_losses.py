"""Every tinker SDK loss function the local backend offers, checked against a direct float64 computation of the formula
on Tinker's loss pages: the summed loss and its gradient with respect to each token's log-probability (where the
formula stops gradients, as cispo's clipped ratio and gspo's sequence ratio do, the gradient is the documented one,
not the derivative of the value), and stable_reinforce against its LOCAL definition (losses.py; the hosted formula is
unpublished). custom raises with its reason. stable_reinforce's provenance checks (stability.py) refuse data whose
spans do not name recorded samples, whose tokens differ from the recorded ones, or with advantages on prompt tokens.
The slow test runs each loss through a real training client (and a create_custom_loss handle through
forward_backward_custom) and recomputes its loss:sum from the log-probabilities the client returned; stable_reinforce
there takes its sampler log-probs from the client's own sampling records."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tinker import types

from cookbook_engine.backends import losses

RNG = np.random.default_rng(7)
N = 9
LOGPROBS = RNG.uniform(-3.0, -0.05, N)  # the trainer's
SAMPLER = LOGPROBS + RNG.uniform(-0.6, 0.6, N)  # the sampler's: ratios from about 0.55 to 1.8, some clipped
ADVANTAGES = np.array([0, 0, 0, 1.5, 1.5, -0.7, -0.7, 2.0, -1.0])
WEIGHTS = np.array([0, 0, 1, 1, 1, 1, 1, 0.5, 1])
MASK = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1])
LOW, HIGH, BETA = 0.85, 1.25, 0.3


def direct(loss_fn: str) -> tuple[float, np.ndarray]:
    """(loss, d loss / d logprobs) from the documented formula, written out in float64 numpy."""
    ratio = np.exp(LOGPROBS - SAMPLER)
    clipped = np.clip(ratio, LOW, HIGH)
    inside = (ratio >= LOW) & (ratio <= HIGH)
    if loss_fn == "cross_entropy":
        return -(WEIGHTS * LOGPROBS).sum(), -WEIGHTS
    if loss_fn == "importance_sampling":
        return -(ratio * ADVANTAGES).sum(), -ratio * ADVANTAGES
    if loss_fn == "ppo":
        unclipped_smaller = ratio * ADVANTAGES <= clipped * ADVANTAGES
        grad = np.where(unclipped_smaller | inside, -ratio * ADVANTAGES, 0.0)
        return -np.minimum(ratio * ADVANTAGES, clipped * ADVANTAGES).sum(), grad
    if loss_fn == "cispo":
        return -(clipped * LOGPROBS * ADVANTAGES).sum(), -clipped * ADVANTAGES
    if loss_fn == "dro":
        value = -(LOGPROBS * ADVANTAGES - 0.5 * BETA * (LOGPROBS - SAMPLER) ** 2).sum()
        return value, -(ADVANTAGES - BETA * (LOGPROBS - SAMPLER))
    if loss_fn == "stable_reinforce":  # truncated IS weight to the recorded sampler, on sampled positions, + k3 KL
        weight = np.clip(ratio, 0.0, HIGH)
        value = -(MASK * weight * ADVANTAGES * LOGPROBS).sum() + BETA * (MASK * (ratio - 1 - np.log(ratio))).sum()
        return value, -MASK * weight * ADVANTAGES + BETA * MASK * (ratio - 1)
    if loss_fn == "gspo":
        s = math.exp(float((LOGPROBS - SAMPLER)[MASK != 0].mean()))
        s_clipped = min(max(s, LOW), HIGH)
        value = -np.minimum(s * ADVANTAGES, s_clipped * ADVANTAGES).sum()
        takes_ratio = (s * ADVANTAGES <= s_clipped * ADVANTAGES) | (LOW <= s <= HIGH)
        return value, np.where(takes_ratio, -s * ADVANTAGES, 0.0)
    raise AssertionError(loss_fn)


CONFIG = {
    "ppo": {"clip_low_threshold": LOW, "clip_high_threshold": HIGH},
    "cispo": {"clip_low_threshold": LOW, "clip_high_threshold": HIGH},
    "gspo": {"clip_low_threshold": LOW, "clip_high_threshold": HIGH},
    "dro": {"beta": BETA},
    "stable_reinforce": {"clip_high_threshold": HIGH, "kl_coeff": BETA},
}
COMPUTED = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")


@pytest.mark.parametrize("loss_fn", COMPUTED)
def test_each_loss_and_its_gradient_match_the_documented_formula_in_float64(loss_fn):
    logprobs = torch.tensor(LOGPROBS, dtype=torch.float64, requires_grad=True)
    inputs = {
        "logprobs": torch.tensor(SAMPLER),
        "advantages": torch.tensor(ADVANTAGES),
        "weights": torch.tensor(WEIGHTS),
        "sequence_ratio_mask": torch.tensor(MASK),
        "sampled_mask": torch.tensor(MASK),
    }
    loss = losses.datum_loss(loss_fn, logprobs, inputs, CONFIG.get(loss_fn))
    loss.backward()
    want_value, want_grad = direct(loss_fn)
    assert float(loss.detach()) == pytest.approx(want_value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(logprobs.grad.numpy(), want_grad, rtol=1e-12, atol=1e-12)


def test_the_test_data_exercise_clipping_on_both_sides():
    ratio = np.exp(LOGPROBS - SAMPLER)
    assert (ratio < LOW).any() and (ratio > HIGH).any() and ((ratio >= LOW) & (ratio <= HIGH)).any()


def test_custom_is_not_a_forward_backward_loss_and_says_so():
    with pytest.raises(NotImplementedError, match="forward_backward_custom"):
        losses.check_inputs("custom", 0, {}, 1)


def recorded(records, sequence_id="seq-a", prompt=(1, 5, 6), sampled=(7, 8, 2), logprobs=(-0.5, -1.0, -0.2)):
    from cookbook_engine.backends.stability import SequenceRecord

    records.add(sequence_id, SequenceRecord("session-1", list(prompt), list(sampled), list(logprobs)))
    return sequence_id


def provenance_datum(sequence_id="seq-a", targets=(5, 6, 7, 8, 2), advantages=(0, 0, 1.0, 1.0, 1.0)) -> types.Datum:
    """The prompt + sampled tokens, shifted by one, with spans as tinker-cookbook's rl_loop builds them."""
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([1, 5, 6, 7, 8]),
        loss_fn_inputs={"target_tokens": list(targets), "advantages": list(advantages), "logprobs": [0.0] * 5},
    )
    return datum.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, length=3),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=2),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=sequence_id, offset=1, length=2),
            types.SampledProvenanceSpan(sequence_id=sequence_id, length=3),
        ],
    )


def test_stable_reinforce_takes_the_recorded_sampler_logprobs_of_the_sampled_positions():
    from cookbook_engine.backends.stability import StabilityRecords, loss_inputs

    records = StabilityRecords()
    recorded(records)
    inputs = loss_inputs(provenance_datum(), 0, records)
    assert inputs["sampled_mask"].tolist() == [0, 0, 1, 1, 1]
    assert inputs["logprobs"].tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0, -0.2])
    assert records.forget_session("session-1") == 1 and len(records) == 0


def test_stable_reinforce_refuses_data_its_records_do_not_back():
    from cookbook_engine.backends.stability import StabilityRecords, loss_inputs

    records = StabilityRecords()
    with pytest.raises(ValueError, match="record_stability_info"):  # never recorded
        loss_inputs(provenance_datum(), 0, records)
    recorded(records)
    with pytest.raises(ValueError, match="target_tokens differ"):
        loss_inputs(provenance_datum(targets=(5, 6, 7, 9, 2)), 0, records)
    with pytest.raises(ValueError, match="sampled tokens only"):
        loss_inputs(provenance_datum(advantages=(0, 1.0, 1.0, 1.0, 1.0)), 0, records)
    bare = types.Datum(model_input=types.ModelInput.from_ints([1]), loss_fn_inputs={"target_tokens": [5]})
    with pytest.raises(ValueError, match="provenance"):
        loss_inputs(bare, 3, records)
    small = StabilityRecords(max_records=1)
    recorded(small, "old")
    recorded(small, "new")
    with pytest.raises(ValueError, match="'old'"):
        small.get("old")


def test_gspo_needs_a_marked_token():
    inputs = {"logprobs": torch.zeros(3), "advantages": torch.ones(3), "sequence_ratio_mask": torch.zeros(3)}
    with pytest.raises(ValueError, match="sequence_ratio_mask"):
        losses.datum_loss("gspo", torch.zeros(3), inputs)


# --- through a real training client -------------------------------------------------------------------------
def rl_datum(tokens: list[int], sampler_lp: list[float], advantages: list[float]) -> types.Datum:
    n = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": sampler_lp[:n],
            "advantages": advantages[:n],
            "weights": [1.0] * n,
            "sequence_ratio_mask": types.TensorData.from_numpy(np.array([0.0] * 2 + [1.0] * (n - 2), dtype=np.float32)),
        },
    )


@pytest.mark.slow
def test_every_loss_through_the_training_client_reports_the_formulas_value(default_model_ready):
    from cookbook_engine.backends.local import LocalServiceClient

    # fp32: the on-policy check below asks the sampler's recorded log-probs to equal the trainer's within 2e-3; in bf16
    # the two paths round apart by up to 0.12 nats (their tolerance is test_local_backend's)
    service = LocalServiceClient(dtype="fp32")
    client = service.create_lora_training_client(default_model_ready, rank=4, seed=0, train_unembed=False).result()
    tokens = [1, 9690, 314, 253, 1345, 30, 2, 421, 17]
    sampler_lp = [-1.0, -2.5, -0.3, -4.0, -1.2, -0.8, -2.2, -0.6]
    advantages = [0.0, 0.0, 1.0, 1.0, -0.5, -0.5, 2.0, 2.0]
    datum = rl_datum(tokens, sampler_lp, advantages)
    for loss_fn in COMPUTED[:-1]:
        out = client.forward([datum], loss_fn, CONFIG.get(loss_fn)).result()
        trainer = torch.tensor(out.loss_fn_outputs[0]["logprobs"].to_numpy(), dtype=torch.float64)
        inputs = {k: v.to_torch().double() for k, v in datum.loss_fn_inputs.items()}
        want = losses.datum_loss(loss_fn, trainer, inputs, CONFIG.get(loss_fn))
        assert out.metrics["loss:sum"] == pytest.approx(float(want), rel=1e-4, abs=1e-4), loss_fn

    # stable_reinforce: sample with records, train on the sample with its provenance
    sampler = client.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = [1, 9690, 314, 253]
    seq = sampler.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=5, seed=1)).result()
    seq = seq.sequences[0]
    full = prompt + seq.tokens
    sr_datum = types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={"target_tokens": full[1:], "advantages": [0.0] * 3 + [1.0] * len(seq.tokens)},
    ).with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=len(prompt)),
            types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens) - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=seq.sequence_id, offset=1, length=len(prompt) - 1),
            types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(seq.tokens)),
        ],
    )
    out = client.forward_backward([sr_datum], "stable_reinforce").result()
    trainer = out.loss_fn_outputs[0]["logprobs"].to_numpy()
    # on policy, right after sampling: the weight is 1 and the loss is plain REINFORCE's, -sum(A * logprobs)
    assert out.metrics["loss:sum"] == pytest.approx(-float(trainer[3:].sum()), rel=1e-3, abs=1e-3)
    np.testing.assert_allclose(trainer[3:], seq.logprobs, atol=2e-3)  # the recorded sampler agrees with the trainer
    with pytest.raises(ValueError, match="provenance"):
        client.forward_backward([datum], "stable_reinforce").result()

    def per_datum(logprobs, advantages):
        return -(logprobs * advantages).sum(), {"custom/adv:sum": advantages.sum()}

    handle = service.create_custom_loss(per_datum, {"logprobs": 1, "advantages": 1}).result()
    out = client.forward_backward_custom([datum, datum], handle).result()
    trainer = torch.tensor(out.loss_fn_outputs[0]["logprobs"].to_numpy(), dtype=torch.float64)
    assert out.metrics["loss:sum"] == pytest.approx(-2 * float((trainer * torch.tensor(advantages)).sum()), rel=1e-4)
    assert out.metrics["custom/adv:sum"] == pytest.approx(2 * sum(advantages))
    service.close()
