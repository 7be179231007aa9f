"""GGUF export: a checkpoint merged into the default model and written as f16 and q8_0 GGUF files loads back with
transformers' GGUF loader (the reader llama.cpp-style files get outside llama.cpp); the f16 file answers greedily
exactly as the merged model does, and the q8_0 file picks the same next token with the log-probabilities of the ten
most likely tokens within 0.25 nats of the merged model's (measured 0.08 to 0.18 with random adapters: q8_0 rounds
each block of 32 weights to 8 bits, and a 135M model feels it)."""

from __future__ import annotations

import json

import pytest
import torch

from cookbook_engine import export, export_gguf, models
from cookbook_engine.backends.local import ATTN_MODULES, MLP_MODULES  # the layers train_attn and train_mlp adapt

pytestmark = pytest.mark.slow
PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
Q8_TOLERANCE_NATS = 0.25


@pytest.fixture(
    scope="module", params=[ATTN_MODULES + MLP_MODULES, ATTN_MODULES], ids=["attention-and-mlp", "attention-only"]
)
def adapter(request, tmp_path_factory, default_model_ready):
    """A LoRA adapter on the default model with non-zero weights (so merging changes the model): on every projection
    (SL's and DPO's default) and on attention only (RL's default, train_mlp=false)."""
    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("adapter")
    torch.manual_seed(0)  # the adapter's A matrices are drawn when it is made
    model = get_peft_model(
        models.load_model(models.DEFAULT_MODEL),
        LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=request.param,
        ),
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.02)
    model.save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": models.DEFAULT_MODEL}))
    return folder


def load_gguf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()


def test_f16_and_q8_0_exports_load_back_and_answer_as_the_merged_model(adapter, tmp_path):
    from peft import PeftModel

    merged = PeftModel.from_pretrained(models.load_model(models.DEFAULT_MODEL), str(adapter)).merge_and_unload().eval()
    tokens = models.load_tokenizer(models.DEFAULT_MODEL)(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        expected = merged.generate(tokens, max_new_tokens=12, do_sample=False)
        expected_logprobs = torch.log_softmax(merged(tokens).logits[0, -1], -1)

    f16 = export_gguf.gguf_export(adapter, "f16", out_dir=tmp_path, name="check")
    q8 = export_gguf.gguf_export(adapter, "q8_0", out_dir=tmp_path, name="check")
    assert f16.name == "check-f16.gguf" and q8.stat().st_size < 0.6 * f16.stat().st_size
    assert export.source_of(f16) == str(adapter)  # deleting the run finds its exports
    with torch.no_grad():
        assert torch.equal(load_gguf(f16).generate(tokens, max_new_tokens=12, do_sample=False), expected)
        q8_logprobs = torch.log_softmax(load_gguf(q8)(tokens).logits[0, -1], -1)
    top = torch.topk(expected_logprobs, 10).indices  # the tokens that matter
    assert q8_logprobs.argmax() == expected_logprobs.argmax()
    assert (q8_logprobs[top] - expected_logprobs[top]).abs().max() < Q8_TOLERANCE_NATS


def test_a_model_without_gguf_tokenizer_data_is_refused_with_the_reason(tmp_path, adapter):
    other = tmp_path / "other"
    other.mkdir()
    for name in export.ADAPTER_FILES:
        (other / name).write_bytes((adapter / name).read_bytes())
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "/some/hf-folder"}))
    with pytest.raises(export.ExportError, match="GGUF tokenizer data"):
        export_gguf.gguf_export(other, "f16", out_dir=tmp_path)
    with pytest.raises(export.ExportError, match="choose one of f16, q8_0"):
        export_gguf.gguf_export(adapter, "q4_0", out_dir=tmp_path)
