"""Several prompts decoded as one batch (sampler.sample_many) give each prompt what it gets alone, on a tiny random
Llama (seconds, no model download): prompts of different lengths (one of a single token) right-aligned in one KV
cache, rows stopping at different steps, greedy and seeded sampling, the batch split when it would exceed
MAX_BATCH_ROW_TOKENS, and the model's own forward agreeing with the merged decoder. The real model's version, with a
LoRA snapshot and the worker's queue, is in tests/test_fast_paths.py."""

from __future__ import annotations

import pytest
import torch
from tinker import types

from cookbook_engine.backends import sampler

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [15], [20, 21, 22, 23, 24]]
PARAMS = [
    types.SamplingParams(max_tokens=10, temperature=0, stop=list(range(0, 97, 9))),
    types.SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, seed=4, stop=list(range(0, 97, 6))),
]


class Tokenizer:
    eos_token_id = 3

    def decode(self, tokens, skip_special_tokens=False):
        return "".join(chr(65 + t % 26) for t in tokens)


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=3,
    )
    return LlamaForCausalLM(config).eval()


def _tokens(results):
    return [[row.tokens for row in rows] for rows, _ in results]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "seeded"])
def test_each_prompt_of_a_batch_gets_what_it_gets_alone(model, params):
    requests = [sampler.Request(p, 2, params, include_prompt_logprobs=True) for p in PROMPTS]
    together = sampler.sample_many(model, Tokenizer(), requests, weights_key="tiny")
    lengths = set()
    for prompt, (rows, prompt_logprobs) in zip(PROMPTS, together):
        alone, alone_prompt_logprobs = sampler.sample(model, Tokenizer(), prompt, 2, params, True, weights_key="tiny")
        assert [r.tokens for r in rows] == [r.tokens for r in alone]
        assert [r.stop_reason for r in rows] == [r.stop_reason for r in alone]
        for a, b in zip(rows, alone):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert prompt_logprobs == pytest.approx(alone_prompt_logprobs, abs=1e-4)
        lengths |= {len(r.tokens) for r in rows}
    assert len(lengths) > 1  # rows stopped at different steps while others decoded on


def test_the_models_own_forward_agrees_and_big_batches_are_split(model, monkeypatch):
    requests = [sampler.Request(p, 2, PARAMS[1]) for p in PROMPTS]
    together = sampler.sample_many(model, Tokenizer(), requests, weights_key="tiny")
    batches = []
    decode = sampler._decode
    monkeypatch.setattr(
        sampler, "_decode", lambda decoder, groups: batches.append(len(groups)) or decode(decoder, groups)
    )
    monkeypatch.setattr(sampler, "MAX_BATCH_ROW_TOKENS", 2 * 2 * 17)  # two prompts of up to 7 + 10 tokens
    split = sampler.sample_many(model, Tokenizer(), requests, weights_key="tiny")
    assert batches == [2, 2] and _tokens(split) == _tokens(together)
    monkeypatch.setattr(sampler, "merged_weights", lambda model, key: None)
    assert _tokens(sampler.sample_many(model, Tokenizer(), requests)) == _tokens(together)


class FakeJob:
    """Stands for a SampleJob on the worker's queue: decode() records the requests it got together."""

    decoded: list[list[str]] = []

    def __init__(self, weights, requests):
        self.weights, self.requests = weights, requests

    def decode(self, requests):
        FakeJob.decoded.append(list(requests))
        if "bad" in requests and len(requests) > 1:
            raise ValueError("one bad request")
        if requests == ["bad"]:
            raise ValueError("bad alone")
        return [f"out:{r}" for r in requests]

    def responses(self, results):
        return results


def test_the_worker_batches_queued_requests_for_the_same_weights_and_isolates_a_bad_one(monkeypatch):
    import concurrent.futures
    import contextlib
    import queue

    from cookbook_engine import compute_lease
    from cookbook_engine.backends import local

    monkeypatch.setattr(local, "SampleJob", FakeJob)
    lease = type("Lease", (), {"hold": staticmethod(contextlib.nullcontext)})()
    monkeypatch.setattr(compute_lease, "lease", lambda: lease)
    worker = local.ModelWorker.__new__(local.ModelWorker)  # the queue and its loop only, no model
    worker._queue, worker.busy_seconds = queue.Queue(), 0.0
    other = lambda: "other"  # noqa: E731

    def put(item):
        future: concurrent.futures.Future = concurrent.futures.Future()
        worker._queue.put((item, future))
        return future

    first = FakeJob("A", ["a1"])
    queued = [put(FakeJob("A", ["a2", "a3"])), put(FakeJob("A", ["bad"])), put(FakeJob("A", ["a4"]))]
    behind = [put(other), put(FakeJob("A", ["a5"])), put(FakeJob("B", ["b1"]))]
    FakeJob.decoded = []
    first_future: concurrent.futures.Future = concurrent.futures.Future()
    first_future.set_running_or_notify_cancel()
    worker._run_samples([(first, first_future), *worker._take_queued_samples("A")])
    assert FakeJob.decoded == [["a1", "a2", "a3", "bad", "a4"], ["a1"], ["a2", "a3"], ["bad"], ["a4"]]
    assert first_future.result() == ["out:a1"] and queued[0].result() == ["out:a2", "out:a3"]
    with pytest.raises(ValueError, match="bad alone"):
        queued[1].result()
    assert queued[2].result() == ["out:a4"]
    assert [item for item, _ in worker._queue.queue][0] is other  # nothing overtook the other work
    assert not any(f.done() for f in behind)
