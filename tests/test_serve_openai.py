"""`cookbook serve`'s OpenAI-compatible endpoint, called with the `openai` Python client: /v1/models lists the base
model and each local checkpoint (by tinker:// path and by `<run id>:<name>`), chat completions answer streamed and not
with the model's chat template (the same text either way for a seeded greedy reply), completions continue a raw
prompt, parameters are honoured (max_tokens, stop, n, seed, usage counts), and bad requests get OpenAI's error shape:
an unknown model 404, bad parameters 400, each naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from test_serve import server  # noqa: F401  (the server on a free port in this process)

from cookbook_engine import chat, config as cfg, models
from cookbook_engine.runs import RunManager
from cookbook_engine.serve import LOCAL_API_KEY, openai_api

WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"]


def client_for(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=LOCAL_API_KEY, max_retries=0, timeout=300)


# ------------------------------------------------------------------------------------------ no model needed


def test_models_lists_the_base_model_and_bad_requests_get_openai_errors(server):  # noqa: F811
    url, _ = server
    client = client_for(url)
    assert [m.id for m in client.models.list()] == [models.DEFAULT_MODEL]
    assert client.models.retrieve(models.DEFAULT_MODEL).owned_by == "cookbook-studio"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found" and "GET /v1/models lists" in missing.value.message
    bad = {
        "temperature": ({"temperature": 5}, "temperature: Input should be less than or equal to 2"),
        "n": ({"n": 0}, "n: Input should be greater than or equal to 1"),
        "tools": ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools: cookbook serve does not"),
        "stop": ({"stop": ["a", "b", "c", "d", "e"]}, "stop: up to 4 non-empty strings"),
        "logprobs": ({"logprobs": True}, "logprobs: not supported"),
    }
    for param, (extra, message) in bad.items():
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model=models.DEFAULT_MODEL, messages=[{"role": "user", "content": "hi"}], **extra
            )
        assert refused.value.param == param and message in refused.value.message, refused.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model=models.DEFAULT_MODEL, messages=[])
    assert empty.value.param == "messages"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=models.DEFAULT_MODEL, prompt="x", echo=True)
    answer = httpx.post(f"{url}/v1/embeddings", json={"model": models.DEFAULT_MODEL, "input": "x"})
    assert answer.status_code == 404 and "/v1/chat/completions" in answer.json()["error"]["message"]
    foreign = httpx.get(f"{url}/v1/models", headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403  # the server's own rules hold for /v1 too


def test_stop_strings_cut_the_text_before_them():
    assert openai_api._cut_at_stop("one. two. three", [". t", "x"]) == ("one", True)
    assert openai_api._cut_at_stop("one", ["x"]) == ("one", False)


# ------------------------------------------------------------------------------------------ the base model


@pytest.mark.slow  # ~50 s on a loaded 2-core CPU (the model's load and seven requests)
def test_the_base_model_chats_streamed_and_not_and_completes_a_prompt(server, default_model_ready):  # noqa: F811
    url, _ = server
    client = client_for(url)
    # a reply longer than the chat's first sampled chunk (chat.FIRST_CHUNK_TOKENS), so that it streams in pieces
    messages = [{"role": "user", "content": "Describe the city of Paris in two sentences."}]
    reply = client.chat.completions.create(
        model=models.DEFAULT_MODEL, messages=messages, temperature=0, max_tokens=20, seed=1
    )
    text = reply.choices[0].message.content
    assert text and reply.choices[0].finish_reason in ("stop", "length")
    assert chat.FIRST_CHUNK_TOKENS < reply.usage.completion_tokens <= 20 and reply.usage.prompt_tokens > 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    stream = client.chat.completions.create(
        model=models.DEFAULT_MODEL,
        messages=messages,
        temperature=0,
        max_tokens=20,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == text and len([p for p in pieces if p]) >= 2  # the same greedy reply, in pieces
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    first_word = text.split()[0]
    cut = client.chat.completions.create(
        model=models.DEFAULT_MODEL, messages=messages, temperature=0, max_tokens=20, seed=1, stop=[first_word]
    )
    assert cut.choices[0].message.content == text[: text.index(first_word)] and cut.choices[0].finish_reason == "stop"
    several = client.chat.completions.create(
        model=models.DEFAULT_MODEL, messages=messages, temperature=1.0, max_tokens=6, n=2, seed=3
    )
    assert [c.index for c in several.choices] == [0, 1]
    completion = client.completions.create(
        model=models.DEFAULT_MODEL, prompt="1, 2, 3, 4,", max_tokens=6, temperature=0
    )
    assert completion.choices[0].text.strip().startswith("5") and completion.usage.completion_tokens <= 6


# ------------------------------------------------------------------------------------------ a trained checkpoint


@pytest.mark.slow  # trains 6 steps first: 70 s on a 2-core AMD EPYC at load ~4
def test_the_openai_client_chats_with_a_trained_checkpoint(server, default_model_ready, tmp_path, capsys):  # noqa: F811
    url, _ = server
    data = tmp_path / "tiny.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"Say {w}.", "completion": w}) for w in WORDS))
    config = cfg.SLConfig(
        dataset=str(data),
        max_steps=6,
        batch_size=4,
        learning_rate=3e-3,
        max_length=64,
        lora_rank=4,
        test_fraction=0.0,
        save_every=0,
        eval_every=0,
    )
    manager = RunManager()
    run_id = manager.start(config)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    (checkpoint,) = manager.store.list_checkpoints(run_id)
    client = client_for(url)
    ids = [m.id for m in client.models.list()]
    tinker_path = next(
        i for i in ids if i.startswith(f"tinker://{Path(checkpoint['sampler_path']).parent.parent.name}")
    )
    assert ids == [models.DEFAULT_MODEL, tinker_path] and tinker_path.endswith(f"/sampler_weights/{checkpoint['name']}")
    short = f"{run_id}:{checkpoint['name']}"
    messages = [{"role": "user", "content": "Say plum."}]
    transcript = [f"models: {ids}"]
    for model in (tinker_path, short):
        reply = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=16, seed=0)
        text = reply.choices[0].message.content
        assert text and reply.model == model and reply.usage.completion_tokens > 0
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=model, messages=messages, temperature=0, max_tokens=16, seed=0, stream=True
            )
            if chunk.choices
        )
        assert streamed == text
        transcript.append(f"{model}: user 'Say plum.' -> {text!r} ({reply.usage.completion_tokens} tokens)")
    base = client.chat.completions.create(
        model=models.DEFAULT_MODEL, messages=messages, temperature=0, max_tokens=16, seed=0
    )
    transcript.append(f"base: -> {base.choices[0].message.content!r}")
    completion = client.completions.create(model=short, prompt="Say fig.", max_tokens=4, temperature=0)
    transcript.append(f"completion {short}: 'Say fig.' -> {completion.choices[0].text!r}")
    with capsys.disabled():
        print("\n" + "\n".join(transcript))

    from streamlit.testing.v1 import AppTest  # the Checkpoints page shows the line to copy for this checkpoint

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app" / "main.py"), default_timeout=120)
    at.run()
    at.query_params["run"] = run_id
    at.switch_page("../pages/checkpoints.py").run()
    assert not at.exception, [e.value for e in at.exception]
    snippet = next(code.value for code in at.code if "from openai import OpenAI" in code.value)
    assert f'base_url="{url}/v1"' in snippet and f'model="{short}"' in snippet
