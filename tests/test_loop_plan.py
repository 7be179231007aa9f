"""One plan per loop: the New run form's estimate shows the step count each loop's `plan(config, prepared)` gives,
and the loop runs exactly that many steps (SL, DPO and RL, with epochs and with max_steps; RL with max_steps=0 runs
num_epochs passes over the env's batches, where the form once said 0). Fake clients and context: no model loads."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from tinker import types

from cookbook_engine import speed
from cookbook_engine.backends.protocol import LocalFuture
from cookbook_engine.config import CommonConfig, DistillConfig, DPOConfig, RLAnchorConfig, RLConfig, SLConfig
from cookbook_engine.distill import loop as distill_loop
from cookbook_engine.dpo import data as dpo_data, loop as preference
from cookbook_engine.rl import envs, loop as rl_loop
from cookbook_engine.runs import loop_module
from cookbook_engine.sl import data as sl_data, loop as supervised
from cookbook_engine.training import skeleton as train_loop
from cookbook_engine.training.common import datum_from_tokens


class FakeLogger:
    def __init__(self) -> None:
        self.metric_steps: list[int] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.latest: dict[str, float] = {}

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.metric_steps.append(step)

    def log_checkpoint(self, **record: Any) -> None:
        self.checkpoints.append(record)

    def log_transcripts(self, rows: list[dict]) -> None:
        pass


class FakeContext:
    def __init__(self, stop_after: int | None = None) -> None:
        self.resume, self.store, self.training_client = None, None, None
        self.logger = FakeLogger()
        self.progress_calls: list[tuple[int, int]] = []
        self.stop_after = stop_after  # Stop pressed once this many steps are done
        self.stopped = False

    def cancelled(self) -> bool:
        return self.stopped

    def progress(self, step: int, total: int) -> None:
        self.progress_calls.append((step, total))
        self.stopped = self.stopped or (self.stop_after is not None and step >= self.stop_after)

    def note(self, message: str) -> None:
        pass


def output_for(data: list[types.Datum], metrics: dict[str, float] | None = None) -> LocalFuture:
    outputs = [{"logprobs": types.TensorData(data=[-1.0] * d.model_input.length, dtype="float32")} for d in data]
    return LocalFuture.completed(
        types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics=metrics or {})
    )


class FakeTrainingClient:
    async def forward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return output_for(data)

    async def forward_backward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> LocalFuture:
        return output_for(data)

    async def forward_backward_custom_async(self, data: list[types.Datum], loss_fn: Any) -> LocalFuture:
        return output_for(data, {"dpo_loss": 0.69})

    async def optim_step_async(self, adam_params: types.AdamParams) -> LocalFuture:
        return LocalFuture.completed(SimpleNamespace(metrics={"grad_norm": 1.0}))

    async def save_state_async(self, name: str) -> LocalFuture:
        return LocalFuture.completed(SimpleNamespace(path=f"/state/{name}"))

    async def save_weights_for_sampler_async(self, name: str) -> LocalFuture:
        return LocalFuture.completed(SimpleNamespace(path=f"/sampler/{name}"))

    async def save_weights_and_get_sampling_client_async(self, name: str | None = None) -> FakeSamplingClient:
        return FakeSamplingClient()


class FakeSamplingClient:
    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float]:
        return [-1.0] * prompt.length


def datums(count: int) -> list[types.Datum]:
    return [datum_from_tokens([1, 2, 3, 4 + i], [0.0, 1.0, 1.0, 1.0]) for i in range(count)]


def sl_prepared(count: int) -> sl_data.PreparedSL:
    train = datums(count)
    return sl_data.PreparedSL(train, datums(2), 0, 0, "fake", sum(d.model_input.length for d in train))


def dpo_prepared(count: int) -> dpo_data.PreparedDPO:
    pairs = [dpo_data.PairDatums(chosen, rejected) for chosen, rejected in zip(datums(count), datums(count))]
    held_out = [dpo_data.PairDatums(chosen, rejected) for chosen, rejected in zip(datums(2), datums(2))]
    return dpo_data.PreparedDPO(pairs, held_out, 0, 0, "fake", 2 * sum(p.chosen.model_input.length for p in pairs))


NO_ANCHOR = RLAnchorConfig(dataset="")  # the fake clients score no anchor (off by default too: test_anchor.py)
# and fix no LoRA A (lora_a=trained: the SL, DPO and RL defaults fix it on the local backend, training/lora_a.py)


def rl_prepared(config: RLConfig) -> rl_loop.PreparedRL:
    return rl_loop.PreparedRL(envs.build_env(config, renderer=None), "fake", None, 0)


def form_steps(config: CommonConfig, prepared: object, monkeypatch: pytest.MonkeyPatch) -> int:
    """The step count the New run form's estimate shows ('N steps × ...'), with this machine's speed unmeasured."""
    from app import forms

    monkeypatch.setattr(speed, "speeds", lambda model: speed.Speeds(100.0, 300.0, 100.0, measured_at=0.0))
    return int(forms.estimate(config, prepared).split(" steps")[0])


def run_loop(
    module: Any, config: CommonConfig, prepared: object, monkeypatch: pytest.MonkeyPatch, stop_after: int | None = None
) -> FakeContext:
    """Run a loop's train() on fake clients; returns the context that recorded it."""
    import asyncio

    client = FakeTrainingClient()
    monkeypatch.setattr(module, "start_training_client", lambda config, resume, ctx: (None, client, 0))
    ctx = FakeContext(stop_after)
    asyncio.run(module.train(config, ctx, prepared))
    return ctx


def fake_rl_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """RL steps that sample nothing: the loop's frame (step count, saves, the end) is what is measured."""

    async def step(
        step: int,
        builders: list,
        sampling_client: Any,
        client: Any,
        config: RLConfig,
        lr: float,
        shaping: Any = None,
        anchor: Any = None,
    ) -> tuple[list, dict[str, float], Any]:
        return [], {}, sampling_client

    async def no_eval(sampling_client: Any, builders: list, config: RLConfig) -> dict[str, float]:
        return {}

    monkeypatch.setattr(rl_loop, "synchronous_step", step)
    monkeypatch.setattr(rl_loop, "evaluate", no_eval)
    monkeypatch.setattr(rl_loop, "log_step", lambda ctx, config, step, total, *rest: ctx.progress(step + 1, total))


CASES = [
    ("sl", SLConfig(batch_size=4, num_epochs=2, max_steps=0, eval_every=0, save_every=2, lora_a="trained"), 10),
    ("sl", SLConfig(batch_size=4, num_epochs=1, max_steps=5, eval_every=0, save_every=0, lora_a="trained"), 10),
    ("sl", SLConfig(batch_size=4, num_epochs=3, max_steps=4, eval_every=0, save_every=0, lora_a="trained"), 10),
    ("dpo", DPOConfig(batch_size=2, num_epochs=2, max_steps=0, eval_every=0, save_every=3, lora_a="trained"), 5),
    ("dpo", DPOConfig(batch_size=2, num_epochs=1, max_steps=6, eval_every=0, save_every=0, lora_a="trained"), 5),
    ("rl", RLConfig(max_steps=0, num_epochs=1, eval_every=0, save_every=0, anchor=NO_ANCHOR, lora_a="trained"), 0),
    ("rl", RLConfig(max_steps=3, eval_every=0, save_every=2, anchor=NO_ANCHOR, lora_a="trained"), 0),
]


@pytest.mark.parametrize("kind,config,count", CASES)
def test_the_forms_step_count_is_the_loops_plan_and_the_loop_runs_it(
    kind: str, config: CommonConfig, count: int, monkeypatch: pytest.MonkeyPatch
):
    prepared = {
        "sl": lambda: sl_prepared(count),
        "dpo": lambda: dpo_prepared(count),
        "rl": lambda: rl_prepared(config),
    }[kind]()
    module = loop_module(kind)
    if kind == "dpo":
        monkeypatch.setattr(preference, "reference_sampling_client", lambda *args: FakeSamplingClient())
    if kind == "rl":
        fake_rl_steps(monkeypatch)
    planned = module.plan(config, prepared).total_steps
    assert planned > 0
    assert form_steps(config, prepared, monkeypatch) == planned
    ctx = run_loop(module, config, prepared, monkeypatch)
    assert ctx.progress_calls[0] == (0, planned)
    assert [step for step, _ in ctx.progress_calls[1:]] == list(range(1, planned + 1))
    final = ctx.logger.checkpoints[-1]
    assert (final["name"], final["step"], final["loop_state"]["final"]) == ("final", planned, True)
    assert ctx.logger.metric_steps[-1] == planned  # the final evaluation (held-out data), after the last step


@pytest.mark.parametrize(
    "config",
    [
        DistillConfig(teacher="/t", groups_per_batch=2, num_epochs=2, eval_every=0, save_every=2),
        DistillConfig(teacher="/t", groups_per_batch=2, max_steps=3, eval_every=0, save_every=0),
    ],
)
def test_a_distillation_runs_the_steps_its_form_shows(config: DistillConfig, monkeypatch: pytest.MonkeyPatch):
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(5)]
    prepared = distill_loop.PreparedDistill(prompts, "fake", None, 10)

    async def step(step: int, prompts: list, renderer: Any, client: Any, sampling_client: Any, *rest: Any):
        return [], {"teacher_kl": 1.0}, sampling_client

    monkeypatch.setattr(distill_loop, "distill_step", step)
    monkeypatch.setattr(distill_loop, "teacher_client", lambda *args: FakeSamplingClient())
    monkeypatch.setattr(distill_loop.renderers, "get_renderer", lambda *args: None)
    planned = distill_loop.plan(config, prepared).total_steps
    assert planned == (config.max_steps or 2 * config.num_epochs)  # 5 prompts in batches of 2: 2 a pass
    assert form_steps(config, prepared, monkeypatch) == planned
    ctx = run_loop(distill_loop, config, prepared, monkeypatch)
    assert [step for step, _ in ctx.progress_calls[1:]] == list(range(1, planned + 1))
    assert ctx.logger.checkpoints[-1]["name"] == "final"


def test_an_rl_run_without_max_steps_makes_num_epochs_passes_over_the_envs_batches():
    config = RLConfig(max_steps=0, num_epochs=2)
    prepared = rl_prepared(config)
    plan = rl_loop.plan(config, prepared)
    assert plan.total_steps == 2 * len(prepared.env.train) == 2 * plan.batches_per_epoch
    assert plan.tokens == plan.total_steps * config.groups_per_batch * config.group_size * config.max_tokens


def test_sl_and_dpo_plan_their_tokens_from_the_average_example():
    config = SLConfig(batch_size=4, num_epochs=1)
    prepared = sl_prepared(8)
    assert supervised.plan(config, prepared) == train_loop.LoopPlan(2, 2, prepared.train_tokens)
    pairs = dpo_prepared(8)
    assert preference.plan(DPOConfig(batch_size=4, num_epochs=1), pairs) == train_loop.LoopPlan(
        2, 2, pairs.train_tokens
    )


@pytest.mark.parametrize("kind", ["sl", "dpo", "rl"])
def test_a_stopped_run_of_any_loop_ends_with_a_checkpoint_of_the_steps_it_completed(
    kind: str, monkeypatch: pytest.MonkeyPatch
):
    """Stop pressed as step 2 finishes: DPO and RL log steps 0-2 and save step 3 as their last checkpoint, not
    'final', with no final evaluation; SL, which queued step 3 before awaiting step 2, finishes step 3 too."""
    config = {
        "sl": SLConfig(batch_size=2, max_steps=6, eval_every=0, save_every=0, lora_a="trained"),
        "dpo": DPOConfig(batch_size=2, max_steps=6, eval_every=0, save_every=0, lora_a="trained"),
        "rl": RLConfig(max_steps=6, eval_every=0, save_every=0, anchor=NO_ANCHOR, lora_a="trained"),
    }[kind]
    prepared = {"sl": lambda: sl_prepared(12), "dpo": lambda: dpo_prepared(12), "rl": lambda: rl_prepared(config)}[
        kind
    ]()
    if kind == "dpo":
        monkeypatch.setattr(preference, "reference_sampling_client", lambda *args: FakeSamplingClient())
    if kind == "rl":
        fake_rl_steps(monkeypatch)
    ctx = run_loop(loop_module(kind), config, prepared, monkeypatch, stop_after=3)
    completed = 4 if kind == "sl" else 3
    assert [step for step, _ in ctx.progress_calls] == list(range(completed + 1))
    if kind != "rl":  # the fake RL steps log nothing
        assert ctx.logger.metric_steps == list(range(completed))  # no final evaluation row either
    final = ctx.logger.checkpoints[-1]
    assert (final["name"], final["step"], final["loop_state"]["batch"]) == (f"{completed:06d}", completed, completed)
    assert final["loop_state"]["final"] is True
