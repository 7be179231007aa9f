"""Turn rollouts into training datums, as tinker-cookbook's rl/data_processing.py does.

A rollout (prompt P tokens, completion C tokens) becomes one datum for next-token prediction over P + C:
model_input = (P + C)[:-1], target_tokens = (P + C)[1:], and per target position the sampler's log-prob, the
advantage and a mask, all 0 on the P - 1 prompt positions and set on the C completion positions. A multi-turn
rollout's C tokens hold the observations between its turns too: its own mask (0 there) zeroes their advantage and
mask, so only the model's tokens train, as tinker-cookbook's trajectory_to_data does for a conversation that grows
by appending. The mask stays
on our side: the SDK rejects unknown loss inputs, so `for_training()` strips it before the datum is sent.
This module also reads the trainer's log-probs back to measure how far the sampler and the trainer disagree
(optim/kl_sample_train) and the sampler's entropy (optim/entropy). No sampling or training here.
"""

from __future__ import annotations

from tinker import types

from cookbook_engine.rl.types import Rollout

SENT_INPUTS = ("target_tokens", "logprobs", "advantages")


def datum_from_rollout(rollout: Rollout, advantage: float) -> types.Datum:
    prompt, completion = rollout.prompt_tokens, rollout.tokens
    if not completion:
        raise ValueError("datum_from_rollout: the completion is empty")
    if len(rollout.logprobs) != len(completion):
        raise ValueError(
            f"datum_from_rollout: {len(rollout.logprobs)} sampler log-probs for {len(completion)} completion tokens"
        )
    mask = [1.0] * len(completion) if rollout.mask is None else [float(m) for m in rollout.mask]
    if len(mask) != len(completion):
        raise ValueError(f"datum_from_rollout: a mask of {len(mask)} for {len(completion)} completion tokens")
    tokens_T = prompt + completion
    prompt_positions = len(prompt) - 1
    zeros = [0.0] * prompt_positions
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens_T[1:], dtype="int64"),
            "logprobs": types.TensorData(data=zeros + [float(lp) for lp in rollout.logprobs], dtype="float32"),
            "advantages": types.TensorData(data=zeros + [float(advantage) * m for m in mask], dtype="float32"),
            "mask": types.TensorData(data=zeros + mask, dtype="float32"),
        },
    )


def for_training(datum: types.Datum) -> types.Datum:
    """The datum without its mask (and anything else the loss does not take), as the SDK accepts it."""
    inputs = {key: value for key, value in datum.loss_fn_inputs.items() if key in SENT_INPUTS}
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


def sample_train_metrics(data_D: list[types.Datum], output: types.ForwardBackwardOutput) -> dict[str, float]:
    """optim/kl_sample_train: mean of (sampler log-prob - trainer log-prob) over completion tokens (near 0 when the
    trainer computes what the sampler sampled with); optim/entropy: mean of -sampler log-prob over them."""
    diff_sum = sampler_sum = count = 0.0
    for datum, out in zip(data_D, output.loss_fn_outputs):
        mask_T = datum.loss_fn_inputs["mask"].to_numpy()
        sampler_T = datum.loss_fn_inputs["logprobs"].to_numpy()
        trainer_T = out["logprobs"].to_numpy()
        diff_sum += float(((sampler_T - trainer_T) * mask_T).sum())
        sampler_sum += float((sampler_T * mask_T).sum())
        count += float(mask_T.sum())
    if count == 0:
        return {}
    return {"optim/kl_sample_train": diff_sum / count, "optim/entropy": -sampler_sum / count}
