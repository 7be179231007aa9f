"""The anchor (`anchor.dataset=`): ordinary chats trained toward the base model's own next-token distribution beside
a run's data (cookbook_engine/training/anchor.py), and the two SDK features it stands on in the local backend:
`sample(..., topk_prompt_logprobs=K)` and `cross_entropy` with (N, K) targets (the latter's equalities are in
tests/test_fast_paths.py)."""

from __future__ import annotations

import asyncio
import json
import math
import shlex

import pytest
from tinker import types
from tinker.proto.response_conv import deserialize_sample_response

from cookbook_engine import config as cfg, models, renderers
from cookbook_engine.backends import local, sampler
from cookbook_engine.backends.local import LocalServiceClient
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.data.loading import DatasetError
from cookbook_engine.serve import wire
from cookbook_engine.training import anchor
from cookbook_engine.training.common import datum_from_tokens


def test_anchor_settings_parse_and_round_trip_as_a_command():
    config = cfg.parse_overrides("sl", ["anchor.dataset=builtin:replay", "anchor.rows=6", "anchor.coef=2"])
    assert (config.anchor.dataset, config.anchor.rows, config.anchor.coef) == ("builtin:replay", 6, 2.0)
    assert "anchor.dataset=builtin:replay" in cfg.to_command(config)
    assert cfg.parse_overrides("sl", []).anchor.dataset == cfg.parse_overrides("dpo", []).anchor.dataset == ""
    rl = cfg.parse_overrides("rl", [])  # off, since B decays instead; when on, RL's measured rows and weight
    assert (rl.anchor.dataset, rl.anchor.rows, rl.anchor.coef) == ("", 8, 3.0)
    on = cfg.parse_overrides("rl", ["anchor.dataset=builtin:replay"])
    assert on.anchor.dataset == "builtin:replay" and "anchor.dataset=builtin:replay" in cfg.to_command(on)
    assert cfg.parse_overrides("rl", shlex.split(cfg.to_command(on))[2:]).anchor.dataset == "builtin:replay"
    with pytest.raises(cfg.ConfigError, match="anchor.rows"):
        cfg.check(cfg.parse_overrides("dpo", ["anchor.rows=0"]))


def test_a_missing_anchor_dataset_is_refused_naming_the_setting():
    config = cfg.parse_overrides("sl", ["anchor.dataset=/no/such/file.jsonl"])
    with pytest.raises(DatasetError, match=r"anchor.dataset=/no/such/file.jsonl: .*not found"):
        anchor.conversations(config)
    assert len(anchor.conversations(cfg.parse_overrides("sl", ["anchor.dataset=builtin:replay"]))) == 292


def test_a_datum_toward_the_base_weights_each_reply_position_by_the_base_probabilities():
    tokens = [5, 6, 7, 8]
    weights = [0.0, 0.0, 1.0, 1.0]  # the reply is tokens 2 and 3
    topk = [None, [(6, -0.1)], [(7, math.log(0.6)), (9, math.log(0.3))], [(8, math.log(0.9))]]
    datum, base_T_K = anchor.datum_toward(tokens, weights, topk, coef=2.0)
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    w = datum.loss_fn_inputs["weights"].to_numpy()
    assert targets.shape == w.shape == (3, anchor.ANCHOR_TOP_K)
    assert w[0].sum() == 0  # a prompt position: no weight
    assert list(targets[1, :2]) == [7, 9] and w[1, :2] == pytest.approx([1.2, 0.6])
    assert w[2, 0] == pytest.approx(1.8) and w[2, 1:].sum() == 0
    assert base_T_K[1, 0] == pytest.approx(math.log(0.6))
    with pytest.raises(ValueError, match="no top-"):
        anchor.datum_toward(tokens, weights, None, coef=1.0)


def test_the_rows_are_taken_in_turn_and_a_resumed_run_goes_on_where_it_was():
    examples = [([1, 2], [0.0, 1.0])] * 5
    fresh = anchor.Anchor(examples, rows=2, coef=1.0, base=None)
    assert [fresh.next_batch() for _ in range(3)] == [[0, 1], [2, 3], [4, 0]]
    resumed = anchor.Anchor(examples, rows=2, coef=1.0, base=None, cursor=2 * 2)
    assert resumed.next_batch() == [4, 0]


class CountingSampler:
    """The base sampler's stand-in: answers top-K requests with one made-up row a position, counting prompts."""

    def __init__(self):
        self.prompts: list[list[int]] = []

    async def sample_async(self, prompt, num_samples, sampling_params, topk_prompt_logprobs=0):
        self.prompts.append(prompt.to_ints())
        rows = [None] + [[(7, math.log(0.5)), (8, math.log(0.25))] for _ in prompt.to_ints()[1:]]
        return types.SampleResponse(sequences=[], _topk_prompt_logprobs_list=rows)


class RecordingClient:
    def __init__(self):
        self.batches: list[list[types.Datum]] = []

    async def forward_backward_async(self, data, loss_fn):
        self.batches.append(data)
        return asyncio.get_running_loop().create_future()


def test_each_step_asks_for_the_next_steps_scores_as_it_sends_its_own_training():
    """The base model's scores of step n+1's chats are asked for when step n's anchor pass goes out (on a hosted
    backend: in the same cycle, not a round trip before step n+1's training)."""
    examples = [([i, i + 1, i + 2], [0.0, 0.0, 1.0]) for i in range(6)]
    sampler, client = CountingSampler(), RecordingClient()

    async def two_steps():
        built = anchor.Anchor(examples, rows=2, coef=1.0, base=sampler)
        built.prefetch()  # as build() does: the first step's chats
        await anchor.submit(client, built)
        await asyncio.sleep(0.01)
        asked_during_step_1 = [p[0] for p in sampler.prompts]
        await anchor.submit(client, built)
        await asyncio.sleep(0.01)
        return asked_during_step_1

    assert asyncio.run(two_steps()) == [0, 1, 2, 3]
    assert [p[0] for p in sampler.prompts] == [0, 1, 2, 3, 4, 5]  # each chat scored once
    assert [[d.model_input.to_ints()[0] for d in batch] for batch in client.batches] == [[0, 1], [2, 3]]


def test_a_chat_is_scored_by_the_base_model_the_first_time_a_step_trains_it_and_only_then():
    """A short run pays for the anchor chats it trains, not for the whole set before its first step."""
    examples = [([i, i + 1, i + 2], [0.0, 0.0, 1.0]) for i in range(5)]
    sampler = CountingSampler()
    built = anchor.Anchor(examples, rows=2, coef=2.0, base=sampler)
    first = asyncio.run(built.datums(built.next_batch()))
    assert sampler.prompts == [[0, 1, 2], [1, 2, 3]] and len(first) == 2
    assert first[0].loss_fn_inputs["weights"].to_numpy()[1, :2] == pytest.approx([1.0, 0.5])  # 2 x (0.5, 0.25)
    asyncio.run(built.datums(built.next_batch()))
    asyncio.run(built.datums(built.next_batch()))  # chats 4 and 0: only 4 is new
    assert [p[0] for p in sampler.prompts] == [0, 1, 2, 3, 4]
    assert sorted(built.data) == sorted(built.base_logprobs) == [0, 1, 2, 3, 4]


def test_top_k_prompt_logprobs_cross_the_wire_as_the_sdk_reads_them():
    rows = [None, [(11, -0.5), (12, -1.5)], [(13, -0.1)]]
    response = types.SampleResponse(sequences=[], _topk_prompt_logprobs_list=rows)
    back = deserialize_sample_response(wire.sample_response(response))
    assert back.topk_prompt_logprobs == [None, [(11, -0.5), (12, -1.5)], [(13, pytest.approx(-0.1))]]


@pytest.fixture(scope="module")
def service(default_model_ready):
    return LocalServiceClient(dtype="fp32")


def _chat_tokens(tokenizer) -> tuple[list[int], list[float]]:
    renderer = renderers.get_renderer("auto", tokenizer)
    chat = [{"role": "user", "content": "What is the capital of Italy?"}, {"role": "assistant", "content": "Rome."}]
    tokens, weights = renderer.build_supervised_example(chat, "last_assistant_message")
    return list(tokens), list(weights)


def test_top_k_prompt_logprobs_are_the_likeliest_tokens_with_compute_logprobs_values(service):
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    tokens, _ = _chat_tokens(tokenizer)
    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    response = base.sample(
        types.ModelInput.from_ints(tokens), 1, types.SamplingParams(max_tokens=1), topk_prompt_logprobs=5
    ).result()
    topk = response.topk_prompt_logprobs
    exact = base.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    assert topk[0] is None and len(topk) == len(tokens)
    for position in range(1, len(tokens)):
        row = topk[position]
        assert len(row) == 5 and [lp for _, lp in row] == sorted((lp for _, lp in row), reverse=True)
        assert sum(math.exp(lp) for _, lp in row) <= 1.0 + 1e-5
        named = dict(row)
        if tokens[position] in named:  # the prompt's own token, when among the five: the same log-prob
            assert named[tokens[position]] == pytest.approx(exact[position], abs=1e-4)
        else:
            assert exact[position] <= row[-1][1] + 1e-4
    with pytest.raises(ValueError, match="topk_prompt_logprobs"):
        base.sample(types.ModelInput.from_ints(tokens), 1, types.SamplingParams(max_tokens=1), topk_prompt_logprobs=-1)


def test_the_anchor_barely_pulls_while_the_model_is_the_base_and_pulls_back_once_it_moved(service, tmp_path):
    """Its point: on the base model the anchor's gradient is small (only the base's own tail, the few percent of
    probability outside its top K, is drawn toward those K), a fraction of what the same chats' reply tokens give
    as plain rows; once the weights move away, anchor/kl rises above zero and the anchor's gradient grows."""
    chats = builtin_data.replay_rows()[:8]
    path = tmp_path / "anchor.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in chats))
    config = cfg.parse_overrides("sl", [f"anchor.dataset={path}", "anchor.rows=4"])
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    built = asyncio.run(anchor.build(config, service))
    assert built is not None and len(built.examples) == 8
    scored = asyncio.run(built.datums(list(range(8))))
    renderer = renderers.get_renderer("auto", tokenizer)
    as_tokens = [
        datum_from_tokens(*renderer.build_supervised_example(row["messages"], "last_assistant_message"))
        for row in chats[:4]
    ]
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=1).result()

    def grad_norm(data):
        client.forward_backward(data, "cross_entropy").result()
        return client.optim_step(types.AdamParams(learning_rate=0.0)).result().metrics["grad_norm"]

    anchored, plain = grad_norm(scored[:4]), grad_norm(as_tokens)
    assert anchored < 0.3 * plain, (anchored, plain)  # measured 0.18 of it
    kl_before = asyncio.run(_anchor_kl(client, built, [0, 1, 2, 3]))
    assert kl_before == pytest.approx(0.0, abs=1e-3)
    italy = [datum_from_tokens(*_chat_tokens(tokenizer))]
    client.forward_backward(italy * 8, "cross_entropy").result()  # move the model elsewhere
    client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert asyncio.run(_anchor_kl(client, built, [0, 1, 2, 3])) > 10 * max(kl_before, 1e-4)
    assert grad_norm(scored[:4]) > 2 * anchored
    client.close()


async def _anchor_kl(client, built: anchor.Anchor, indices: list[int]) -> float:
    future = await client.forward_async(await built.datums(indices), "cross_entropy")
    return (await anchor.AnchorPass(built, indices, future).metrics())["anchor/kl"]


def test_prompts_scored_together_get_the_top_k_each_gets_alone(service):
    """Several requests decoded as one batch have their top-K scored in shared packed passes: each prompt's rows
    (its own k) equal those of the prompt sampled alone, so no prompt sees another's tokens across the packing."""
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    renderer = renderers.get_renderer("auto", tokenizer)
    chats = builtin_data.replay_rows()[:5]
    prompts = [list(renderer.build_supervised_example(c["messages"], "last_assistant_message")[0]) for c in chats]
    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    params = types.SamplingParams(max_tokens=1, seed=3)
    requests = [sampler.Request(p, 1, params, False, 3 + i % 2 * 2) for i, p in enumerate(prompts)]
    job = local.SampleJob(base, requests, None, False, [None] * len(requests), False)
    together = base._worker.submit(job).result()
    for request, response in zip(requests, together):
        prompt, k = types.ModelInput.from_ints(request.prompt_tokens), request.topk_prompt_logprobs
        alone = base.sample(prompt, 1, params, topk_prompt_logprobs=k).result()
        assert len(response.topk_prompt_logprobs) == len(request.prompt_tokens)
        for row, alone_row in zip(response.topk_prompt_logprobs[1:], alone.topk_prompt_logprobs[1:]):
            assert len(row) == k
            assert [t for t, _ in row] == [t for t, _ in alone_row]
            assert [lp for _, lp in row] == pytest.approx([lp for _, lp in alone_row], abs=1e-4)
