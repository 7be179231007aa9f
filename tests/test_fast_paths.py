"""The local backend's fast paths compute what the straightforward ones compute.

Training: losses, per-token log-probs and LoRA gradients of the packed path (no padding, oneDNN matmuls, fused LoRA,
LM-head gradient only where the loss needs it) against a padded batch through the plain transformers + peft modules
with full logits. Sampling: the merged-weights decoder's log-probs against compute_logprobs, its greedy tokens
against transformers' generate (base model and a LoRA snapshot), and top-p over a shortlist against the full sort.
"""

import math

import pytest
import torch
from tinker import types

from cookbook_engine import calibration, models
from cookbook_engine.backends import compat, fast_ops, losses, packing, sampler
from cookbook_engine.backends.local import LocalServiceClient
from cookbook_engine.renderers import get_renderer
from cookbook_engine.training.common import datum_from_tokens

# A bf16 decoder (layers' matmuls in bf16, fast_ops.decode_in_bf16) against an fp32 forward of the same bf16 weights:
# the largest logit difference at the default model's first reply token (logits of size 10-30). Measured 0.196 on an
# Intel Xeon with AMX, 2026-11-28; the same decoder in fp32 arithmetic on those weights: 8e-5.
BF16_DECODE_LOGIT_TOLERANCE = 0.5

CHATS = [
    ("What is the capital of France?", "Paris."),
    (
        "Name three colours of the rainbow and say which one is between the other two.",
        "Red, orange and yellow: orange lies between red and yellow.",
    ),
    ("Hi", "Hello! How can I help you today?"),
    (
        "Write one sentence about the sea, then one about the mountains, then one about a city at night.",
        "The sea rolls grey under the wind. The mountains hold snow long into June. At night the city hums with "
        "light and the last trams rattle home.",
    ),
]


@pytest.fixture(scope="module")
def service(default_model_ready):
    """fp32, whatever dtype=auto picks on this CPU: these are equalities of two ways to compute the same thing, which
    hold to float rounding in fp32; bf16 against fp32 has its own tolerances (tests/test_bf16.py)."""
    return LocalServiceClient(dtype="fp32")


@pytest.fixture(scope="module")
def tokenizer(service):
    return models.load_tokenizer(models.DEFAULT_MODEL)


@pytest.fixture(scope="module")
def data(tokenizer):
    renderer = get_renderer("auto", tokenizer)
    return [
        datum_from_tokens(
            *renderer.build_supervised_example([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        )
        for q, a in CHATS
    ]


@pytest.fixture(scope="module")
def trained(service, data):
    """A training client whose adapter is no longer zero (one big step), so LoRA matters in every comparison."""
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=3).result()
    client.forward_backward(data, "cross_entropy")
    client.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    yield client
    client.close()


def _with_advantages(data):
    """The same data for ppo: sampler log-probs a little off, advantages zero on the prompt and mixed on replies."""
    out = []
    for index, datum in enumerate(data):
        weights = datum.loss_fn_inputs["weights"].to_torch()
        advantages = weights * (1.0 if index % 2 else -0.5)
        out.append(
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": types.TensorData.from_torch(-torch.ones_like(weights)),
                    "advantages": types.TensorData.from_torch(advantages),
                },
            )
        )
    return out


def _with_topk(data, k=3):
    """The same data with top-K targets (the SDK's cross_entropy on (N, K) inputs) on every other datum: each
    position's own next token and k - 1 others, weighted like soft targets; the rest keep one target a position."""
    out = []
    for index, datum in enumerate(data):
        if index % 2:
            out.append(datum)
            continue
        targets_T = datum.loss_fn_inputs["target_tokens"].to_torch().long()
        weights_T = datum.loss_fn_inputs["weights"].to_torch()
        others_T_K = (targets_T[:, None] + torch.arange(1, k)[None] * 17) % 49152
        targets_T_K = torch.cat([targets_T[:, None], others_T_K], dim=1)
        weights_T_K = weights_T[:, None] * torch.tensor([0.7] + [0.3 / (k - 1)] * (k - 1))[None]
        out.append(
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": types.TensorData.from_torch(targets_T_K),
                    "weights": types.TensorData.from_torch(weights_T_K),
                },
            )
        )
    return out


def _reference(client, data, loss_fn):
    """Loss, log-probs and adapter gradients from the padded path with full logits through the plain modules
    (transformers' Linear on torch's default matmul, peft's LoRA forward)."""
    worker = client._worker

    def job():
        previous, fast_ops.ONEDNN = fast_ops.ONEDNN, False
        worker.activate(client.adapter)
        worker.model.train()
        params = worker.adapter_params(client.adapter)
        for p in params:
            p.grad = None
        try:
            total = 0.0

            def backward(indices, pieces):
                nonlocal total
                loss = sum(
                    losses.datum_loss(loss_fn, lp, {k: v.to_torch() for k, v in data[i].loss_fn_inputs.items()})
                    for i, lp in zip(indices, pieces)
                )
                loss.backward()
                total += float(loss)

            logprobs = client._logprobs_padded(data, True, backward)
            grads = [p.grad.clone() for p in params]
            for p in params:
                p.grad = None
            return total, logprobs, grads
        finally:
            fast_ops.ONEDNN = previous
            worker.model.eval()

    return worker.call(job)


def _fast(client, data, loss_fn):
    worker = client._worker
    out = client.forward_backward(data, loss_fn).result()

    def grads():
        params = worker.adapter_params(client.adapter)
        result = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        return result

    logprobs = [d["logprobs"].to_torch() for d in out.loss_fn_outputs]
    return out.metrics["loss:sum"], logprobs, worker.call(grads)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "ppo", "cross_entropy top-K"])
def test_packed_training_step_equals_padded_full_logits(trained, data, loss_fn):
    if loss_fn == "cross_entropy top-K":
        data, loss_fn = _with_topk(data), "cross_entropy"
    data = data if loss_fn == "cross_entropy" else _with_advantages(data)
    assert fast_ops.supports_packed(trained._worker.model)
    fast_loss, fast_lp, fast_grads = _fast(trained, data, loss_fn)
    ref_loss, ref_lp, ref_grads = _reference(trained, data, loss_fn)
    assert fast_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-4)
    for fast, ref in zip(fast_lp, ref_lp):
        assert fast.shape == ref.shape
        assert torch.allclose(fast, ref, atol=2e-4)
    assert len(fast_grads) == len(ref_grads) > 0
    worst = max(float((f - r).norm() / r.norm()) for f, r in zip(fast_grads, ref_grads))
    assert worst < 2e-4, f"relative gradient difference {worst}"


def _sharing_a_prompt(tokenizer, loss_fn):
    """An RL group or DPO pairs as the loops build them: four replies to one question (the prompt unweighted), the
    last with other targets on its prompt (so its prompt's log-probs are its own), and a chat asking something else."""
    renderer = get_renderer("auto", tokenizer)
    question = "Name three colours of the rainbow and say which one is between the other two."
    replies = ["Red, orange and yellow.", "Blue.", "Orange lies between red and yellow.", "Green, I think."]
    chats = [(question, reply) for reply in replies] + [("What is the capital of France?", "Paris.")]
    data = []
    for index, (q, a) in enumerate(chats):
        tokens, weights = renderer.build_supervised_example(
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        )
        datum = datum_from_tokens(tokens, weights)
        targets_T = datum.loss_fn_inputs["target_tokens"].to_torch().clone()
        weights_T = datum.loss_fn_inputs["weights"].to_torch()
        if index == 3:
            targets_T[:5] = (targets_T[:5] + 1) % 49152  # unweighted positions, other targets
        inputs = {"target_tokens": types.TensorData.from_torch(targets_T)}
        if loss_fn == "ppo":
            inputs["logprobs"] = types.TensorData.from_torch(-torch.ones_like(weights_T))
            inputs["advantages"] = types.TensorData.from_torch(weights_T * (1.0 if index % 2 else -0.5))
        else:
            inputs["weights"] = types.TensorData.from_torch(weights_T)
        data.append(types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return data


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "ppo"])
def test_data_sharing_a_prompt_run_it_once_and_train_as_if_apart(trained, tokenizer, loss_fn, monkeypatch):
    """The packed row holds the question once for its four replies (packing.py), and the losses, log-probs and
    gradients are still those of every datum run alone through the plain modules."""
    data = _sharing_a_prompt(tokenizer, loss_fn)
    rows = []
    pack = packing.pack
    monkeypatch.setattr(packing, "pack", lambda *args: rows.append(pack(*args)) or rows[-1])
    fast_loss, fast_lp, fast_grads = _fast(trained, data, loss_fn)
    total = sum(d.model_input.length for d in data)
    key = "weights" if loss_fn == "cross_entropy" else "advantages"
    prompt = int(data[0].loss_fn_inputs[key].to_torch().nonzero()[0, 0])  # the positions the loss does not use
    assert len(rows) == 1 and len(rows[0].ids) == total - 3 * prompt > 0
    assert sum(1 for segment in rows[0].segments if segment.context_end > segment.context_start) == 4
    ref_loss, ref_lp, ref_grads = _reference(trained, data, loss_fn)
    assert fast_loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-4)
    for fast, ref in zip(fast_lp, ref_lp):
        assert fast.shape == ref.shape
        assert torch.allclose(fast, ref, atol=2e-4)
    worst = max(float((f - r).norm() / r.norm()) for f, r in zip(fast_grads, ref_grads))
    assert worst < 2e-4, f"relative gradient difference {worst}"


def test_top_k_cross_entropy_is_the_weighted_sum_over_its_targets(trained, data):
    """A (N, K) datum's loss and log-probs are those of K one-target datums, each with its column of weights: what
    Tinker's cross_entropy docs define for top-K distillation."""
    topk = _with_topk(data)[0]
    targets_T_K = topk.loss_fn_inputs["target_tokens"].to_torch()
    weights_T_K = topk.loss_fn_inputs["weights"].to_torch()
    columns = [
        types.Datum(
            model_input=topk.model_input,
            loss_fn_inputs={
                "target_tokens": types.TensorData.from_torch(targets_T_K[:, k].contiguous()),
                "weights": types.TensorData.from_torch(weights_T_K[:, k].contiguous()),
            },
        )
        for k in range(targets_T_K.shape[1])
    ]
    together = trained.forward([topk], "cross_entropy").result()
    apart = trained.forward(columns, "cross_entropy").result()
    assert together.metrics["loss:sum"] == pytest.approx(apart.metrics["loss:sum"], rel=1e-5)
    logprobs_T_K = together.loss_fn_outputs[0]["logprobs"].to_torch()
    assert logprobs_T_K.shape == targets_T_K.shape
    for k, out in enumerate(apart.loss_fn_outputs):
        assert torch.allclose(logprobs_T_K[:, k], out["logprobs"].to_torch(), atol=1e-5)


def test_top_k_targets_are_refused_for_other_losses_and_with_weights_of_another_shape(trained, data):
    topk = _with_topk(data)[0]
    with pytest.raises(ValueError, match="cross_entropy only"):
        trained.forward(_with_advantages([topk]), "ppo").result()
    flat = types.Datum(
        model_input=topk.model_input,
        loss_fn_inputs={
            "target_tokens": topk.loss_fn_inputs["target_tokens"],
            "weights": data[0].loss_fn_inputs["weights"],
        },
    )
    with pytest.raises(ValueError, match="weights of shape"):
        trained.forward([flat], "cross_entropy").result()


def test_forward_without_backward_and_compute_logprobs_equal_padded(trained, data):
    fast = trained.forward(data, "cross_entropy").result()
    _, ref_lp, _ = _reference(trained, data, "cross_entropy")
    for out, ref in zip(fast.loss_fn_outputs, ref_lp):
        assert torch.allclose(out["logprobs"].to_torch(), ref, atol=2e-4)
    tokens = data[1].model_input.to_ints() + [data[1].loss_fn_inputs["target_tokens"].to_torch()[-1].item()]
    sampling = trained.save_weights_and_get_sampling_client()
    assert sampling.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[1:] == pytest.approx(
        ref_lp[1].tolist(), abs=2e-4
    )


def test_data_with_nothing_to_learn_train_without_error(service, data):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=4, seed=5).result()
    silent = [
        types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={
                "target_tokens": d.loss_fn_inputs["target_tokens"],
                "weights": types.TensorData.from_torch(torch.zeros(d.model_input.length)),
            },
        )
        for d in data
    ]
    out = client.forward_backward(silent, "cross_entropy").result()
    assert out.metrics["loss:sum"] == 0.0 and len(out.loss_fn_outputs) == len(silent)
    assert client.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["grad_norm"] == 0.0
    client.close()


def test_lm_head_gradient_only_where_needed_matches_autograd():
    torch.manual_seed(0)
    weight = torch.randn(500, 16)
    hidden = (torch.randn(40, 16) * 4).requires_grad_()  # large norms: confident, peaked predictions
    targets = torch.randint(0, 500, (40,))
    upstream = torch.randn(40) * (torch.rand(40) > 0.5)  # zero on about half the rows
    grad_rows = upstream != 0
    fast = fast_ops.head_logprobs(hidden, weight, targets, grad_rows)
    (fast * upstream).sum().backward()
    fast_grad, hidden.grad = hidden.grad.clone(), None
    hidden64 = hidden.detach().double().requires_grad_()
    ref = sampler.target_logprobs((hidden64 @ weight.double().t())[None], targets[None])[0]
    (ref * upstream.double()).sum().backward()
    assert torch.allclose(fast.double(), ref, atol=1e-5)
    assert torch.allclose(fast_grad.double(), hidden64.grad, rtol=1e-5, atol=1e-5)
    assert bool((fast_grad[~grad_rows] == 0).all())


@pytest.mark.parametrize("kernel", ["onednn", "mkl"])  # onednn: the fused LoRA op; mkl: peft's own forward
def test_bf16_base_is_mixed_precision_and_keeps_a_small_lora_delta(kernel, monkeypatch):
    """bf16 base weights with fp32 activations: the base matmul runs in bf16 and returns fp32, and a LoRA delta of
    ~1e-3 of the output (below bf16's half-ulp, what a few Adam steps give) is added in fp32, not rounded away; the
    gradients of x, A and B are fp32."""
    from peft import LoraConfig, get_peft_model

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 32, bias=False)

        def forward(self, x):
            return self.proj(x)

    monkeypatch.setitem(fast_ops.KERNELS, "train", kernel)
    torch.manual_seed(0)
    model = Tiny().to(torch.bfloat16).requires_grad_(False)
    fast_ops.install_frozen_linears(model)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=4, target_modules=["proj"], init_lora_weights=False))
    fast_ops.install_fast_lora(model)
    layer = model.base_model.model.proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.dtype == b.dtype == torch.float32
    x = torch.randn(8, 64, requires_grad=True)
    base = layer.base_layer(x)
    assert base.dtype == torch.float32
    assert torch.allclose(base, x.detach().bfloat16().float() @ layer.base_layer.weight.float().t(), rtol=1e-2)
    with torch.no_grad():
        delta = x @ a.t() @ b.t()
        b.mul_(1e-3 * float(base.norm() / delta.norm()))
        delta = x @ a.t() @ b.t()
    y = model(x)
    assert y.dtype == torch.float32
    # the delta's error relative to its own size: peft's forward adds an fp32 delta (measured 3.5e-5); the fused op
    # computes it by bf16 matmuls, as autocast does (measured 0.005). Rounded away into a bf16 sum it would be ~1.
    error = float((y - base - delta).abs().max() / delta.abs().max())
    assert error < (0.02 if kernel == "onednn" else 1e-3), error
    y.square().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32 and b.grad is not None and b.grad.dtype == torch.float32
    assert a.grad is not None and a.grad.dtype == torch.float32
    # the same gradients by autograd in fp32 on the bf16-rounded weight: equal up to bf16 rounding of the matmuls
    x_ref, a_ref, b_ref = (t.detach().clone().requires_grad_(True) for t in (x, a, b))
    weight = layer.base_layer.weight.float()
    scale = float(layer.scaling["default"])
    (x_ref @ weight.t() + scale * (x_ref @ a_ref.t()) @ b_ref.t()).square().sum().backward()
    for ours, reference in ((x.grad, x_ref.grad), (a.grad, a_ref.grad), (b.grad, b_ref.grad)):
        assert reference is not None
        assert float((ours - reference).norm() / reference.norm()) < 0.02


def test_bf16_logits_come_from_an_fp32_head_so_near_ties_stay_apart(default_model_ready):
    """A mixed-precision model's LM head computes fp32 logits (from a cached fp32 copy of the bf16 weight): a bf16
    head rounded the logits to steps of up to 1/4, which tied the default model's 'The' and 'L' (0.08 nats apart in
    fp32) as the first token for the capital of France, and the greedy reply became "L'Étoile, la Marseillaise..."."""
    model = models.load_model(default_model_ready, torch.bfloat16).eval().requires_grad_(False)  # as the worker has it
    fast_ops.install_frozen_linears(model)
    head = model.get_output_embeddings()
    assert type(head) is fast_ops.FrozenHead and head.weight.dtype == torch.bfloat16
    tokenizer = models.load_tokenizer(default_model_ready)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    ids = torch.tensor([get_renderer("auto", tokenizer).build_generation_prompt(question).to_ints()])
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    assert logits.dtype == torch.float32 and bool((logits != logits.bfloat16().float()).any())  # not bf16 values
    top2 = logits.log_softmax(-1).topk(2)
    assert tokenizer.decode([int(top2.indices[0])]) == "The" and float(top2.values[0] - top2.values[1]) > 0.03


# ---------------------------------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("bf16_matmuls", [False, True])
def test_a_bf16_model_decodes_on_the_fast_decoder_with_the_logits_of_its_weights(
    default_model_ready, bf16_matmuls, monkeypatch
):
    """dtype=auto picks bf16 on a CPU with bf16 units; its sampler must still batch prompts on the fast decoder (the
    model's own forward decodes one prompt at a time: an evaluation 10x slower). Where the calibration measured bf16
    decode matmuls slower (AMD EPYC without AMX) the decoder computes in fp32 on the bf16 weights, so its logits equal
    an fp32 forward of the same bf16-rounded weights; where faster (AMX) the layers' matmuls run in bf16 on bf16
    activations and the logits stay within BF16_DECODE_LOGIT_TOLERANCE of it, the same greedy token first."""
    from cookbook_engine.backends import fast_decode

    monkeypatch.setattr(fast_ops, "decode_in_bf16", lambda: bf16_matmuls)
    if bf16_matmuls and "unsupported" in calibration.measure_decode_bf16("mkl"):
        pytest.skip("the bf16 decoder runs on oneDNN's bf16 kernels, which this CPU or torch lacks")
    bf16 = models.load_model(default_model_ready, torch.bfloat16).eval().requires_grad_(False)
    fast_ops.install_frozen_linears(bf16)  # as the worker holds it
    merged = fast_decode.MergedLlama.from_model(bf16)
    assert merged is not None and merged.head.dtype == torch.float32 and merged.embed.dtype == torch.float32
    assert merged.layers[0].qkv.dtype == (torch.bfloat16 if bf16_matmuls else torch.float32)
    rounded = models.load_model(default_model_ready).eval()
    with torch.no_grad():
        for parameter in rounded.parameters():
            parameter.copy_(parameter.bfloat16().float())
    tokenizer = models.load_tokenizer(default_model_ready)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    ids = get_renderer("auto", tokenizer).build_generation_prompt(question).to_ints()
    cos, sin = merged.rope_table(len(ids) + 1)
    hidden = merged.prefill(torch.tensor([ids]), [0], None, merged.new_cache(1, len(ids) + 1), cos, sin)
    ours = merged.logits(hidden[:, -1])[0]
    with torch.no_grad():
        reference = rounded(torch.tensor([ids])).logits[0, -1]
    tolerance = BF16_DECODE_LOGIT_TOLERANCE if bf16_matmuls else 2e-3
    assert torch.allclose(ours, reference, atol=tolerance), float((ours - reference).abs().max())
    assert tokenizer.decode([int(ours.argmax())]) == "The"


def _sorted_as_dict(probs_B_K, ids_B_K, row):
    return {int(i): float(p) for p, i in zip(probs_B_K[row], ids_B_K[row]) if p > 0}


@pytest.mark.parametrize("top_k", [0, 20, 300])
def test_top_p_shortlist_keeps_exactly_what_the_full_sort_keeps(top_k):
    generator = torch.Generator().manual_seed(0)
    vocab = 5000
    peaked = torch.randn(6, vocab, generator=generator) * 6  # nucleus well inside a 64-token shortlist
    flat = torch.randn(4, vocab, generator=generator) * 0.3  # nucleus of thousands of tokens: falls back
    scores = torch.cat([peaked, flat])
    for top_p in (0.3, 0.9, 0.99):
        short_probs, short_ids = sampler.nucleus(scores, top_k, top_p, shortlist=64)
        full_probs, full_ids = sampler.nucleus_sorted(scores, top_k, top_p)
        for row in range(scores.shape[0]):
            short, full = _sorted_as_dict(short_probs, short_ids, row), _sorted_as_dict(full_probs, full_ids, row)
            assert short.keys() == full.keys(), (top_p, row)
            assert all(math.isclose(short[i], full[i], rel_tol=1e-5) for i in full)
    params = types.SamplingParams(temperature=0.7, top_p=0.9, top_k=top_k)
    for seed in range(40):
        picks = [
            sampler.choose_next(scores, params, torch.Generator().manual_seed(seed), shortlist=size)
            for size in (64, vocab)
        ]
        assert torch.equal(picks[0], picks[1])


def test_sampling_picks_follow_the_kept_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = types.SamplingParams(temperature=1.0, top_p=0.7)
    generator = torch.Generator().manual_seed(1)
    counts = torch.bincount(
        torch.cat([sampler.choose_next(logits, params, generator) for _ in range(4000)]), minlength=4
    )
    assert counts[2] == counts[3] == 0  # 0.5 + 0.3 already reach 0.7
    assert abs(counts[0] / 4000 - 0.5 / 0.8) < 0.03


@pytest.fixture(scope="module")
def prompt(tokenizer):
    renderer = get_renderer("auto", tokenizer)
    return renderer.build_generation_prompt([{"role": "user", "content": "Tell me about lighthouses."}])


def test_sampled_logprobs_of_a_lora_snapshot_match_compute_logprobs(trained, prompt):
    sampling = trained.save_weights_and_get_sampling_client()
    params = types.SamplingParams(max_tokens=24, temperature=1.0, top_p=0.95, seed=5, stop=[])
    response = sampling.sample(prompt, 3, params, include_prompt_logprobs=True).result()
    for seq in response.sequences:
        full = sampling.compute_logprobs(types.ModelInput.from_ints(prompt.to_ints() + seq.tokens)).result()
        assert seq.logprobs == pytest.approx(full[prompt.length :], abs=2e-3)
        assert response.prompt_logprobs[1:] == pytest.approx(full[1 : prompt.length], abs=2e-3)


def _hf_greedy(model, prompt, count):
    ids = torch.tensor([prompt.to_ints()])
    with torch.inference_mode():
        out = model.generate(ids, do_sample=False, max_new_tokens=count, min_new_tokens=count, pad_token_id=2)
    return out[0, ids.shape[1] :].tolist()


def test_greedy_tokens_equal_transformers_generate_for_base_and_lora_snapshot(service, data, prompt):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    greedy = types.SamplingParams(max_tokens=32, temperature=0, stop=[])
    plain = AutoModelForCausalLM.from_pretrained(str(models.default_cache_dir()), dtype=torch.float32).eval()
    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    base_tokens = base.sample(prompt, 1, greedy).result().sequences[0].tokens
    assert base_tokens == _hf_greedy(plain, prompt, 32)

    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=8, seed=4).result()
    for _ in range(3):  # a typical LoRA learning rate: the answer changes, the model stays fluent
        client.forward_backward(data, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=2e-3))
    path = client.save_weights_for_sampler("greedy-check").result().path
    client.close()
    snapshot = service.create_sampling_client(model_path=path).result()
    ours = snapshot.sample(prompt, 2, greedy).result().sequences
    reference = _hf_greedy(PeftModel.from_pretrained(plain, str(compat.resolve(path))).eval(), prompt, 32)
    assert ours[0].tokens == ours[1].tokens == reference
    assert reference != base_tokens


def test_model_forward_decoder_agrees_with_the_merged_one(service, prompt, monkeypatch):
    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    params = types.SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=11, stop=[])
    fast = base.sample(prompt, 4, params).result().sequences
    monkeypatch.setattr(sampler, "merged_weights", lambda model, key: None)
    slow = base.sample(prompt, 4, params).result().sequences
    assert [s.tokens for s in fast] == [s.tokens for s in slow]
    for a, b in zip(fast, slow):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)


def test_alternating_weights_build_each_decoder_once(service, trained, data, monkeypatch):
    """Alternating the base model and a fine-tuned snapshot (chat side by side) builds each one's fast decoder once,
    and each sampler gets the tokens of its own weights."""
    from cookbook_engine.backends import fast_decode

    builds = []
    build = fast_decode.MergedLlama.from_model
    monkeypatch.setattr(fast_decode.MergedLlama, "from_model", lambda model: builds.append(1) or build(model))
    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    tuned = trained.save_weights_and_get_sampling_client("alternate")
    prompt = data[0].model_input
    greedy = types.SamplingParams(max_tokens=8, temperature=0, stop=[])
    first_base = base.sample(prompt, 1, greedy).result().sequences[0].tokens
    first_tuned = tuned.sample(prompt, 1, greedy).result().sequences[0].tokens
    built = len(builds)
    for _ in range(2):
        assert base.sample(prompt, 1, greedy).result().sequences[0].tokens == first_base
        assert tuned.sample(prompt, 1, greedy).result().sequences[0].tokens == first_tuned
    assert len(builds) == built  # nothing rebuilt while alternating


def test_prompts_decoded_as_one_batch_get_the_tokens_each_gets_alone(service, trained, data):
    """sample_many decodes prompts of different lengths together (right-aligned in one KV cache, per-row positions
    and masks): greedy tokens and seeded samples equal those of each prompt sampled alone, log-probs to fp32
    rounding, and stop reasons agree (rows that stop early leave the batch while others decode)."""
    snapshot = trained.save_weights_and_get_sampling_client("batched").result()
    prompts = [types.ModelInput.from_ints(d.model_input.to_ints()[: 6 + 9 * i]) for i, d in enumerate(data)]
    for params in (
        types.SamplingParams(max_tokens=12, temperature=0),
        types.SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, seed=5),
    ):
        together = snapshot.sample_many(prompts, 2, params).result()
        for prompt, batched in zip(prompts, together):
            alone = snapshot.sample(prompt, 2, params).result()
            assert [s.tokens for s in batched.sequences] == [s.tokens for s in alone.sequences]
            assert [s.stop_reason for s in batched.sequences] == [s.stop_reason for s in alone.sequences]
            for a, b in zip(batched.sequences, alone.sequences):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_sampling_requests_queued_together_are_decoded_as_one_batch(service, data, monkeypatch):
    """Requests for the same weights waiting in the worker's queue (an RL step's groups) decode in one batch, and
    each gets what it gets alone."""
    import threading

    base = service.create_sampling_client(base_model=models.DEFAULT_MODEL).result()
    prompts = [types.ModelInput.from_ints(d.model_input.to_ints()[: 5 + 7 * i]) for i, d in enumerate(data)]
    params = types.SamplingParams(max_tokens=6, temperature=0.7, seed=3, stop=[])
    batches: list[int] = []
    real = sampler.sample_many
    monkeypatch.setattr(
        sampler,
        "sample_many",
        lambda model, tok, requests, *a, **k: batches.append(len(requests)) or real(model, tok, requests, *a, **k),
    )
    gate = threading.Event()
    base._worker.submit(gate.wait)  # the worker is busy while the requests queue up
    futures = [base.sample(prompt, 2, params) for prompt in prompts]
    gate.set()
    together = [future.result() for future in futures]
    assert batches == [len(prompts)]
    for prompt, response in zip(prompts, together):
        alone = base.sample(prompt, 2, params).result()
        assert [s.tokens for s in response.sequences] == [s.tokens for s in alone.sequences]

    gate = threading.Event()
    base._worker.submit(gate.wait)
    good = base.sample(prompts[0], 2, params)
    too_long = base.sample(types.ModelInput.from_ints([1] * (base._worker.max_context + 1)), 1, params)
    gate.set()
    assert [s.tokens for s in good.result().sequences] == [s.tokens for s in together[0].sequences]
    with pytest.raises(ValueError, match="the context holds"):
        too_long.result()  # refused alone: its batch-mate above was not failed with it
