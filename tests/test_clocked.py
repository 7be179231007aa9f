"""The clocked simulator counts Tinker-style clock cycles per training step: the real SL loop, which queues the next
batch before awaiting the previous one, pays one cycle per step; a loop that awaits forward_backward before sending
optim_step pays two or more. Also: answers come one tick after admission, a cycle admits one optimizer step per
client, and errors reach the caller instead of stopping the clock. RL: the synchronous loop submits forward_backward,
optim_step and the request for the next sampling client in one cycle; streaming minibatches train while later groups
are still being sampled (fewer cycles per step); off-policy sampling drops groups staler than max_steps_off_policy."""

import asyncio
import json
import time

import pytest
from tinker import types

from cookbook_engine import paths
from cookbook_engine.backends import clocked, service_client
from cookbook_engine.backends.clocked import ClockedServiceClient
from cookbook_engine.config import ClockedConfig, PipeliningConfig, RLAnchorConfig, RLConfig, SLConfig
from cookbook_engine.rl import envs
from cookbook_engine.runs import RunManager
from cookbook_engine.sl.loop import batch_at, plan_steps, prepare
from cookbook_engine.training.common import adam_params
from storage import Store

PERIOD_S = 0.2  # longer than the SL loop's own work per step (~50 ms); compute beyond it only stretches cycles
STEPS = 6
SHORT_CHATS = [
    ("Hi", "Hello."),
    ("Bye", "Goodbye."),
    ("Thanks", "You're welcome."),
    ("Yes?", "Yes."),
    ("Ping", "Pong."),
    ("Up?", "Down."),
    ("Red?", "Blue."),
    ("One?", "Two."),
]


@pytest.fixture
def short_chats(tmp_path):
    """Conversations of ~20 tokens, so that a batch of 2 is quick to train even on a loaded 2-core CPU."""
    path = tmp_path / "short.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n"
            for q, a in SHORT_CHATS
        )
    )
    return path


def tiny_config(dataset, **overrides) -> SLConfig:
    settings = dict(
        dataset=str(dataset),
        backend="clocked",
        clocked=ClockedConfig(PERIOD_S),
        batch_size=2,
        max_length=64,
        max_steps=STEPS,
        learning_rate=1e-4,
        lora_rank=4,
        test_fraction=0.0,
        eval_every=0,
        save_every=0,
    )
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
    service = service_client("clocked", clocked=ClockedConfig(PERIOD_S))
    client = service.create_lora_training_client(config.model, rank=4, seed=0)

    async def unpipelined():
        for step in range(total):
            forward_backward = await client.forward_backward_async(
                batch_at(prepared.train, config, step, batches_per_epoch), "cross_entropy"
            )
            await forward_backward
            optim = await client.optim_step_async(adam_params(config, 1e-4))
            await optim

    with service:
        asyncio.run(unpipelined())
    per_step = service.cycles_per_step()
    print(f"unpipelined SL: {per_step:.2f} cycles/step, optim answers at ticks {service.optim_step_ticks}")
    assert per_step >= 1.8


def test_answers_arrive_one_tick_after_admission_and_one_optim_step_per_cycle(default_model_ready):
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints([1, 9, 10]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=[9, 10, 2], dtype="int64"),
                "weights": types.TensorData(data=[0.0, 1.0, 1.0], dtype="float32"),
            },
        )
    ]
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
        time.sleep(0.3)  # nothing to do: the clock waits without counting ticks
        assert service.tick_count == before and service.stats.idle_waits > 0
        assert client.optim_step(types.AdamParams(learning_rate=1e-4)).result(timeout=60).metrics is not None
        assert service.tick_count > before


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="clocked.period_s=0: must be positive"):
        ClockedServiceClient(period_s=0)


# ------------------------------------------------------------------------------------------------ RL schedules

RL_PERIOD_S = 0.4  # longer than the RL loop's own work between an answer and its next request


@pytest.fixture
def mixed_rewards(monkeypatch):
    """Every RL group built by the runs of this test gets rewards 0, 1, 0, 1, ... (so every group trains and the
    cycle counts do not depend on what the model samples)."""
    build_env = envs.build_env
    monkeypatch.setattr(
        envs, "build_env", lambda config, renderer: envs.with_fixed_mixed_rewards(build_env(config, renderer))
    )


def rl_config(**overrides) -> RLConfig:
    settings = dict(
        env="arithmetic",
        backend="clocked",
        clocked=ClockedConfig(RL_PERIOD_S),
        group_size=4,
        groups_per_batch=2,
        max_tokens=4,
        max_steps=3,
        eval_every=0,
        num_eval_problems=0,
        save_every=0,
        lora_rank=4,
        learning_rate=1e-4,
        temperature=1.0,
        anchor=RLAnchorConfig(dataset=""),  # the cycles of the run's own work (an anchor adds its chats' scoring)
    )
    return RLConfig(**{**settings, **overrides})


def run_rl(config: RLConfig) -> tuple[clocked.ClockStats, str]:
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    return clocked.latest_stats(), run_id


def rl_cycles_per_step(stats: clocked.ClockStats) -> float:
    """Ticks between consecutive new sampling clients (one per RL step, after its last optimizer step)."""
    ticks = [tick for tick, methods in stats.cycle_log if "save_weights_and_get_sampling_client" in methods]
    return (ticks[-1] - ticks[0]) / (len(ticks) - 1)


def test_synchronous_rl_submits_forward_backward_optim_step_and_the_new_sampler_in_one_cycle(
    home, default_model_ready, mixed_rewards
):
    stats, _ = run_rl(rl_config())
    per_step = rl_cycles_per_step(stats)
    print(f"synchronous RL: {per_step:.2f} cycles/step; cycles {stats.cycle_log}")
    training_cycles = [methods for _, methods in stats.cycle_log if "optim_step" in methods]
    assert training_cycles == [["forward_backward", "optim_step", "save_weights_and_get_sampling_client"]] * 3
    # sample (answer next tick), then train + new sampler (answer next tick): 4 cycles; awaiting each request = 6+
    assert per_step <= 4.34


def test_streaming_minibatches_overlap_sampling_with_training(home, default_model_ready, mixed_rewards):
    """A sampler that takes one request per tick returns a step's groups in waves. Synchronous RL waits for the
    last wave before its first optimizer substep; streaming trains each substep as soon as its group is in."""
    same_work = dict(clocked=ClockedConfig(RL_PERIOD_S, samples_per_tick=1), num_substeps=2)
    sync_stats, _ = run_rl(rl_config(**same_work))
    stream_stats, run_id = run_rl(rl_config(**same_work, pipelining=PipeliningConfig(stream_minibatch=True)))
    sync, stream = rl_cycles_per_step(sync_stats), rl_cycles_per_step(stream_stats)
    print(f"RL, 2 groups sampled one per tick, 2 substeps: synchronous {sync:.2f}, streaming {stream:.2f} cycles/step")
    assert sync >= 6  # 2 sampling waves, their answer, 2 optimizer cycles, their answer
    assert stream <= 5.34 and stream <= sync - 0.66  # the first substep trains during the second wave
    # streaming: each step's first optimizer substep is admitted right after its first group's answer, one cycle
    # after the second group's sampling was admitted (synchronous: one cycle after the second group's answer)
    first_step = stream_stats.cycle_log[1:5]
    assert [methods for _, methods in first_step] == [
        ["sample"],
        ["sample"],
        ["forward_backward", "optim_step"],
        ["forward_backward", "optim_step", "save_weights_and_get_sampling_client"],
    ]
    assert [tick for tick, _ in first_step] == list(range(first_step[0][0], first_step[0][0] + 4))  # no idle cycle
    transcripts = Store.default().get_transcripts(run_id)
    assert len(transcripts) == 3 * 2 * 4 and set(transcripts.step) == {0, 1, 2}


def test_off_policy_sampling_drops_groups_older_than_max_steps_off_policy(home, default_model_ready, mixed_rewards):
    """A slow trainer (8 optimizer substeps: 9 cycles a step) against a sampler that takes 2 cycles a round: the
    workers sample all 4 batches with the first policy while step 0 trains. Step 1 trains batch 1 (1 step old, as
    allowed); at step 2, batches 2 and 3 are 2 steps old: their 4 groups are dropped and sampled again with the
    newest policy, so steps 2 and 3 train fresh groups."""
    config = rl_config(max_steps=4, num_substeps=8, pipelining=PipeliningConfig(max_steps_off_policy=1), loss_fn="ppo")
    stats, run_id = run_rl(config)
    store = Store.default()
    dropped = store.get_metrics(run_id, ["async/stale_groups_dropped"])
    assert dict(zip(dropped.step, dropped.value)) == {0: 0.0, 1: 0.0, 2: 4.0, 3: 0.0}
    staleness = store.get_metrics(run_id, ["async/staleness_max"])
    assert dict(zip(staleness.step, staleness.value)) == {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}
    transcripts = store.get_transcripts(run_id)
    assert len(transcripts) == 4 * 2 * 4
    trained_lag = [row.metrics["staleness"] for row in transcripts.itertuples()]
    assert max(trained_lag) <= config.pipelining.max_steps_off_policy
    assert all(
        row.metrics["sampled_at_step"] == row.step - row.metrics["staleness"] for row in transcripts.itertuples()
    )
    # steps 2 and 3 trained the re-sampled problems of batches 2 and 3
    assert sorted({row.metrics["problem_batch"] for row in transcripts.itertuples() if row.step >= 2}) == [2, 3]


def test_an_anchored_rl_step_still_sends_its_training_in_one_cycle(home, default_model_ready, mixed_rewards):
    """An anchor (anchor.dataset=builtin:replay, training/anchor.py) adds a forward_backward on its chats to each
    step's training cycle, and the base model's scoring of the next step's chats goes out in that same cycle
    (prefetched), so a hosted run's step costs no extra round trip for it."""
    stats, run_id = run_rl(rl_config(anchor=RLAnchorConfig(dataset="builtin:replay", rows=2)))
    per_step = rl_cycles_per_step(stats)
    print(f"anchored synchronous RL: {per_step:.2f} cycles/step; cycles {stats.cycle_log}")
    training_cycles = [sorted(methods) for _, methods in stats.cycle_log if "optim_step" in methods]
    expected = ["forward_backward", "forward_backward", "optim_step", "save_weights_and_get_sampling_client"]
    assert training_cycles == [sorted([*expected, "sample", "sample"])] * 3  # one request per anchor chat
    assert per_step <= 4.34  # as without the anchor
    kl = Store.default().get_metrics(run_id, ["anchor/kl"])
    assert len(kl) == 3 and kl.value.iloc[0] == pytest.approx(0.0, abs=1e-3)


def test_a_clocked_rl_run_fixes_lora_a_as_the_local_backend_does(home, default_model_ready, mixed_rewards):
    """lora_a=null_space is allowed on the clocked backend (it wraps the local one) and reaches its training client."""
    _, run_id = run_rl(rl_config(lora_a="null_space", train_mlp=False, max_steps=1))
    log = (paths.run_dir(run_id) / "log.txt").read_text()
    assert "LoRA's A fixed on 120 projections to the 4 input directions" in log  # 30 layers x q, k, v, o
