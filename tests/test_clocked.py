"""The clocked simulator counts Tinker-style clock cycles per training step: the real SL loop, which queues the next
batch before awaiting the previous one, pays one cycle per step; a loop that awaits forward_backward before sending
optim_step pays two or more. Also: answers come one tick after admission, a cycle admits one optimizer step per
client, and errors reach the caller instead of stopping the clock."""

import asyncio
import json
import time

import pytest
from tinker import types

from cookbook_engine.backends import clocked, service_client
from cookbook_engine.backends.clocked import ClockedServiceClient
from cookbook_engine.config import SLConfig
from cookbook_engine.runs import RunManager
from cookbook_engine.supervised import batch_at, plan_steps, prepare
from cookbook_engine.train_common import adam_params

PERIOD_S = 0.2  # longer than the SL loop's own work per step (~50 ms); compute beyond it only stretches cycles
STEPS = 6
SHORT_CHATS = [("Hi", "Hello."), ("Bye", "Goodbye."), ("Thanks", "You're welcome."), ("Yes?", "Yes."),
               ("Ping", "Pong."), ("Up?", "Down."), ("Red?", "Blue."), ("One?", "Two.")]


@pytest.fixture
def short_chats(tmp_path):
    """Conversations of ~20 tokens, so that a batch of 2 is quick to train even on a loaded 2-core CPU."""
    path = tmp_path / "short.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for q, a in SHORT_CHATS))
    return path


def tiny_config(dataset, **overrides) -> SLConfig:
    settings = dict(dataset=str(dataset), backend="clocked", clock_period_s=PERIOD_S, batch_size=2, max_length=64,
                    max_steps=STEPS, learning_rate=1e-4, lora_rank=4, test_fraction=0.0, eval_every=0, save_every=0)
    return SLConfig(**{**settings, **overrides})


def test_the_sl_loop_pays_one_clock_cycle_per_step(home, default_model_ready, short_chats):
    manager = RunManager()
    run_id = manager.start(tiny_config(short_chats))
    run = manager.wait(run_id, timeout=300)
    assert run["status"] == "completed", run.get("traceback")
    service = clocked.latest_stats()
    assert len(service.optim_step_ticks) == STEPS
    per_step = service.cycles_per_step()
    print(f"pipelined SL: {per_step:.2f} cycles/step, optim answers at ticks {service.optim_step_ticks}")
    assert per_step <= 1.2
    # each step's forward_backward and optim_step were admitted together, in one cycle
    step_cycles = [methods for _, methods in service.cycle_log if "optim_step" in methods]
    assert all(methods[:2] == ["forward_backward", "optim_step"] for methods in step_cycles)
    assert manager.store.last_checkpoint(run_id)["step"] == STEPS


def test_awaiting_forward_backward_before_optim_step_costs_two_or_more_cycles(default_model_ready, short_chats):
    config = tiny_config(short_chats, max_steps=4)
    prepared = prepare(config)
    batches_per_epoch, total = plan_steps(config, len(prepared.train))
    service = service_client("clocked", clock_period_s=PERIOD_S)
    client = service.create_lora_training_client(config.model, rank=4, seed=0)

    async def unpipelined():
        for step in range(total):
            forward_backward = await client.forward_backward_async(
                batch_at(prepared.train, config, step, batches_per_epoch), "cross_entropy")
            await forward_backward
            optim = await client.optim_step_async(adam_params(config, 1e-4))
            await optim

    with service:
        asyncio.run(unpipelined())
    per_step = service.cycles_per_step()
    print(f"unpipelined SL: {per_step:.2f} cycles/step, optim answers at ticks {service.optim_step_ticks}")
    assert per_step >= 1.8


def test_answers_arrive_one_tick_after_admission_and_one_optim_step_per_cycle(default_model_ready):
    data = [types.Datum(model_input=types.ModelInput.from_ints([1, 9, 10]),
                        loss_fn_inputs={"target_tokens": types.TensorData(data=[9, 10, 2], dtype="int64"),
                                        "weights": types.TensorData(data=[0.0, 1.0, 1.0], dtype="float32")})]
    with ClockedServiceClient(period_s=0.1) as service:
        client = service.create_lora_training_client("default", rank=4, seed=0)
        futures = []
        for _ in range(2):  # two whole steps queued at once
            futures.append(client.forward_backward(data, "cross_entropy"))
            futures.append(client.optim_step(types.AdamParams(learning_rate=1e-4)))
        saved = client.save_state("after-two")
        for future in futures:
            future.result(timeout=120)
        assert saved.result(timeout=120).path
        logged = [methods for _, methods in service.cycle_log]
        # one optimizer step per cycle; the checkpoint rides along behind the second one
        assert logged == [["forward_backward", "optim_step"], ["forward_backward", "optim_step", "save_state"]]
        assert service.optim_step_ticks[1] - service.optim_step_ticks[0] == 1
        admitted_at = service.cycle_log[0][0]
        assert service.optim_step_ticks[0] == admitted_at + 1  # the answer comes at the next tick
        assert service.tick_count >= service.cycles


def test_a_failing_request_fails_alone_and_the_clock_keeps_going(default_model_ready):
    with ClockedServiceClient(period_s=0.05) as service:
        client = service.create_lora_training_client("default", rank=4, seed=0)
        bad = client.forward_backward([], "cross_entropy")  # no data: the local backend refuses it
        with pytest.raises(ValueError, match="no data"):
            bad.result(timeout=60)
        ok = client.optim_step(types.AdamParams(learning_rate=1e-4))
        assert ok.result(timeout=60).metrics is not None
        before = service.tick_count
        time.sleep(0.3)
        assert service.tick_count > before


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="clock_period_s"):
        ClockedServiceClient(period_s=0)
