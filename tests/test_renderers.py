"""Renderers turn conversations into the exact tokens the model's chat format uses, with loss weights on the
right tokens, and parse sampled tokens back. Uses the default model's real tokenizer (no model weights)."""

import pytest

from cookbook_engine import models
from cookbook_engine.renderers import RendererError, TrainOnWhat, get_renderer, renderer_names

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]


@pytest.fixture(scope="module")
def tokenizer(default_model_ready):
    return models.load_tokenizer(models.DEFAULT_MODEL)


def trained_text(tokenizer, tokens, weights):
    return tokenizer.decode([t for t, w in zip(tokens, weights) if w > 0])


def test_template_renderer_matches_the_tokenizers_chat_template(tokenizer):
    tokens, weights = get_renderer("template", tokenizer).build_supervised_example(CONVERSATION)
    expected = tokenizer.apply_chat_template(CONVERSATION, tokenize=True)["input_ids"]
    assert tokens == expected
    assert len(weights) == len(tokens)


def test_auto_picks_the_models_own_template(tokenizer):
    assert get_renderer("auto", tokenizer).name == "template"


def test_chatml_renderer_agrees_with_smollm_template_when_a_system_prompt_is_given(tokenizer):
    a = get_renderer("template", tokenizer).build_supervised_example(CONVERSATION)
    b = get_renderer("chatml", tokenizer).build_supervised_example(CONVERSATION)
    assert a == b


@pytest.mark.parametrize("name", ["template", "chatml", "qwen3"])
def test_train_on_what_selects_the_trained_tokens(tokenizer, name):
    renderer = get_renderer(name, tokenizer)
    last = trained_text(tokenizer, *renderer.build_supervised_example(CONVERSATION, TrainOnWhat.LAST_ASSISTANT_MESSAGE))
    both = trained_text(tokenizer, *renderer.build_supervised_example(CONVERSATION, "all_assistant_messages"))
    everything = renderer.build_supervised_example(CONVERSATION, "all_messages")
    assert last == "4<|im_end|>"
    assert both == "Hello!<|im_end|>4<|im_end|>"
    assert "Hi there" in trained_text(tokenizer, *everything)
    assert "<|im_start|>" not in trained_text(tokenizer, *everything)  # headers are never trained on


def test_generation_prompt_ends_with_the_assistant_header(tokenizer):
    prompt = get_renderer("auto", tokenizer).build_generation_prompt(CONVERSATION[:2]).to_ints()
    assert tokenizer.decode(prompt).endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")


def test_parse_response_stops_at_the_end_of_turn(tokenizer):
    renderer = get_renderer("auto", tokenizer)
    message, ended = renderer.parse_response(tokenizer.encode("Paris.<|im_end|>junk"))
    assert message == {"role": "assistant", "content": "Paris."} and ended
    message, ended = renderer.parse_response(tokenizer.encode("Par"))
    assert message["content"] == "Par" and not ended


def test_role_colon_and_llama3_render_their_own_formats(tokenizer):
    tokens, weights = get_renderer("role_colon", tokenizer).build_supervised_example(CONVERSATION)
    text = tokenizer.decode(tokens)
    assert "User: Hi there" in text and "Assistant: Hello!" in text
    assert trained_text(tokenizer, tokens, weights) == " 4\n\n"
    assert get_renderer("role_colon", tokenizer).get_stop_sequences() == ["\n\nUser:"]
    llama = get_renderer("llama3", tokenizer)
    tokens = llama.build_supervised_example(CONVERSATION)[0]
    assert "<|start_header_id|>assistant<|end_header_id|>" in tokenizer.decode(tokens)


def test_qwen3_drops_thinking_from_replies(tokenizer):
    renderer = get_renderer("qwen3", tokenizer)
    message, _ = renderer.parse_response(tokenizer.encode("<think>hmm</think>\n\nParis<|im_end|>"))
    assert message["content"] == "Paris"


def test_bad_renderer_and_bad_conversations_give_clear_errors(tokenizer):
    with pytest.raises(RendererError, match="renderer 'nope' is unknown"):
        get_renderer("nope", tokenizer)
    renderer = get_renderer("auto", tokenizer)
    with pytest.raises(RendererError, match="unknown role 'robot'"):
        renderer.build_supervised_example([{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}])
    with pytest.raises(RendererError, match="no assistant message"):
        renderer.build_supervised_example([{"role": "user", "content": "x"}])
    assert set(renderer_names()) >= {"auto", "template", "chatml", "llama3", "qwen3", "role_colon"}
