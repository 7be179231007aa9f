"""Supervised fine-tuning (SL), mirroring tinker-cookbook's supervised/train.py.

`prepare()` loads and validates the chat dataset, renders every conversation to tokens and loss weights
(TrainOnWhat), fits them to max_length (truncating or dropping, with counts) and builds datums: all the checks that
can fail on bad input run here, before a run exists. `train()` is the loop: batches are submitted ahead (the next
step's forward_backward and optim_step are queued before the previous step's results are awaited), the learning
rate follows a linear / cosine / constant schedule, test NLL is computed every `eval_every` steps, the state is
saved every `save_every` steps and at the end, and a resumed run continues at its checkpoint's batch.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from tinker import types

from cookbook_engine import datasets, renderers, suggested
from cookbook_engine.config import SLConfig
from cookbook_engine.evals.in_training import NamedEvals
from cookbook_engine.train_common import (adam_params, datum_from_tokens, fit_length, learning_rate_for,
                                          lr_multiplier, save_checkpoint, start_training_client, tokenizer_for)


@dataclass
class PreparedSL:
    train: list[types.Datum]
    test: list[types.Datum]
    truncated: int
    dropped: int
    renderer: str
    train_tokens: int

    def summary(self) -> str:
        parts = [f"{len(self.train)} training and {len(self.test)} held-out examples",
                 f"{self.train_tokens:,} training tokens", f"renderer {self.renderer}"]
        if self.truncated:
            parts.append(f"{self.truncated} over-long examples truncated")
        if self.dropped:
            parts.append(f"{self.dropped} over-long examples dropped")
        return ", ".join(parts)


def render_examples(conversations: list[list[dict]], renderer, config: SLConfig
                    ) -> tuple[list[types.Datum], int, int]:
    datums, truncated, dropped = [], 0, 0
    for conversation in conversations:
        tokens, weights = renderer.build_supervised_example(conversation, config.train_on_what)
        fitted = fit_length(tokens, weights, config.max_length, config.overlong)
        if fitted is None:
            dropped += 1
            continue
        truncated += len(fitted[0]) < len(tokens)
        datums.append(datum_from_tokens(*fitted))
    return datums, truncated, dropped


def prepare(config: SLConfig) -> PreparedSL:
    tokenizer = tokenizer_for(config)
    renderer = renderers.get_renderer(config.renderer, tokenizer)
    data = datasets.load_chat_dataset(config.dataset, test_fraction=config.test_fraction,
                                      test_spec=config.test_dataset or None, seed=config.seed,
                                      max_examples=config.max_examples or None)
    train, truncated, dropped = render_examples(data.train, renderer, config)
    test, _, _ = render_examples(data.test, renderer, config)
    if not train:
        raise datasets.DatasetError(f"{config.dataset}: no example fits max_length={config.max_length} "
                                    "with tokens left to train on")
    return PreparedSL(train, test, truncated, dropped, renderer.name,
                      sum(d.model_input.length for d in train))


def sl_learning_rate(config: SLConfig) -> float:
    """The rate a run trains with: the set one; with learning_rate=auto, the measured one for this built-in data
    (suggested.py) or else the model's suggested rate."""
    if config.learning_rate is not None:
        return config.learning_rate
    measured = suggested.measured_for(config)
    return measured.learning_rate if measured else learning_rate_for(config)


def plan_steps(config: SLConfig, num_examples: int) -> tuple[int, int]:
    """(batches per epoch, total steps)."""
    batches_per_epoch = max(1, num_examples // config.batch_size)
    total = batches_per_epoch * config.num_epochs
    if config.max_steps:
        total = min(total, config.max_steps) if config.num_epochs > 1 else config.max_steps
    return batches_per_epoch, total


def passes_note(config: SLConfig, batches_per_epoch: int, total_steps: int) -> str:
    """How many passes over the training data `total_steps` make, said plainly ("1 pass", "1.5 passes"), and when
    max_steps makes that more or fewer than the Epochs setting, that it does."""
    passes = total_steps / batches_per_epoch
    text = f"{passes:.3g} pass{'' if passes == 1 else 'es'} over the data ({batches_per_epoch} steps each)"
    if abs(passes - config.num_epochs) > 1e-9:
        text += f", set by max_steps={config.max_steps}, not num_epochs={config.num_epochs}"
    return text


def batch_at(train: list[types.Datum], config: SLConfig, step: int, batches_per_epoch: int) -> list[types.Datum]:
    """The batch of a step: a deterministic shuffle per epoch, so a resumed run sees the same order."""
    epoch, index = divmod(step, batches_per_epoch)
    order = list(range(len(train)))
    random.Random(config.seed * 100_003 + epoch).shuffle(order)
    size = min(config.batch_size, len(train))
    return [train[i] for i in order[index * size:(index + 1) * size]]


def weighted_nll(data: list[types.Datum], output: types.ForwardBackwardOutput) -> tuple[float, float]:
    """(sum of -logprob * weight, sum of weights) over a batch."""
    total, weight_sum = 0.0, 0.0
    for datum, out in zip(data, output.loss_fn_outputs):
        weights = datum.loss_fn_inputs["weights"].to_numpy()
        total += float(-(out["logprobs"].to_numpy() * weights).sum())
        weight_sum += float(weights.sum())
    return total, weight_sum


async def evaluate(client, test: list[types.Datum], batch_size: int = 16) -> dict[str, float]:
    futures = [await client.forward_async(test[i:i + batch_size], "cross_entropy")
               for i in range(0, len(test), batch_size)]
    total, weight_sum = 0.0, 0.0
    for start, future in zip(range(0, len(test), batch_size), futures):
        nll, weights = weighted_nll(test[start:start + batch_size], await future)
        total, weight_sum = total + nll, weight_sum + weights
    return {"test/nll": total / max(weight_sum, 1e-9)}


async def train(config: SLConfig, ctx, prepared: PreparedSL | None = None) -> None:
    prepared = prepared or prepare(config)
    _, client, start_step = start_training_client(config, ctx.resume, ctx)
    named_evals = NamedEvals.for_config(config)  # evals=...: test/<set>/<metric> at the same points as test NLL
    base_lr = sl_learning_rate(config)
    batches_per_epoch, total_steps = plan_steps(config, len(prepared.train))
    ctx.note(f"SL on {config.model}: {prepared.summary()}; {total_steps} steps of {config.batch_size} = "
             f"{passes_note(config, batches_per_epoch, total_steps)}, "
             f"lr {base_lr:g} ({config.lr_schedule})" + (f"; resuming at step {start_step}" if start_step else ""))
    ctx.progress(start_step, total_steps)
    run_started = time.perf_counter()
    clock = {"last_done": run_started}
    pending = None

    async def finish(item) -> None:
        step, fb_future, optim_future, batch, lr, submitted, extra = item
        output = await fb_future
        optim = await optim_future
        nll, weight_sum = weighted_nll(batch, output)
        now = time.perf_counter()
        # wall time since the previous step finished (or since this one was submitted, if later): with submit-ahead
        # pipelining, this is the step's own share of the time.
        elapsed = now - max(submitted, clock["last_done"])
        clock["last_done"] = now
        num_tokens = sum(d.model_input.length for d in batch)
        metrics = {
            "train_mean_nll": nll / max(weight_sum, 1e-9), "learning_rate": lr, "num_tokens": num_tokens,
            "num_loss_tokens": weight_sum, "num_sequences": len(batch), "epoch": step // batches_per_epoch,
            "progress": (step + 1) / total_steps, "time/step": elapsed, "time/total": time.perf_counter() - run_started,
            "throughput/tokens_per_s": num_tokens / max(elapsed, 1e-9),
        }
        if optim.metrics and "grad_norm" in optim.metrics:
            metrics["optim/grad_norm"] = optim.metrics["grad_norm"]
        metrics.update(extra)
        ctx.logger.log_metrics(step, metrics)
        ctx.progress(step + 1, total_steps)

    step = start_step
    for step in range(start_step, total_steps):
        if ctx.cancelled():
            break
        extra = {}
        if config.eval_every and step % config.eval_every == 0 and (prepared.test or named_evals):
            # weights after `step` steps, before this batch
            extra = (await evaluate(client, prepared.test) if prepared.test else {}) | await named_evals(client)
        batch = batch_at(prepared.train, config, step, batches_per_epoch)
        lr = base_lr * lr_multiplier(config.lr_schedule, step, total_steps)
        submitted = time.perf_counter()
        fb_future = await client.forward_backward_async(batch, "cross_entropy")
        optim_future = await client.optim_step_async(adam_params(config, lr))
        if pending is not None:
            await finish(pending)  # the previous step's results, while this step is already queued
        pending = (step, fb_future, optim_future, batch, lr, submitted, extra)
        done = step + 1
        if config.save_every and done % config.save_every == 0 and done < total_steps:
            await finish(pending)
            pending = None
            await save_checkpoint(client, ctx, step=done, name=f"{done:06d}",
                                  loop_state={"batch": done, "epoch": done // batches_per_epoch})
    else:
        step = total_steps
    if pending is not None:
        await finish(pending)
        step = pending[0] + 1
    completed = step if ctx.cancelled() else total_steps
    if not ctx.cancelled() and (prepared.test or named_evals):
        ctx.logger.log_metrics(total_steps, (await evaluate(client, prepared.test) if prepared.test else {})
                               | await named_evals(client))
    await save_checkpoint(client, ctx, step=completed, name="final" if completed == total_steps else f"{completed:06d}",
                          loop_state={"batch": completed, "epoch": completed // batches_per_epoch}, final=True)
    ctx.note(f"saved step {completed} of {total_steps}")

