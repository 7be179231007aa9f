"""LoRA that reads away from ordinary chats (`lora_a=null_space`, training/null_space.py): the directions are the ones
where the task's inputs have variance and ordinary chats' have none; on the real default model a fixed A stays fixed
through training, saving and resuming while B learns; the setting resolves and refuses as documented."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from tinker import types

from cookbook_engine import config as cfg, models, paths
from cookbook_engine.backends import compat
from cookbook_engine.backends.local import ATTN_MODULES, LORA_A_FIXED_MARKER, LocalServiceClient
from cookbook_engine.data import builtin as builtin_data
from cookbook_engine.renderers import get_renderer
from cookbook_engine.rl import arithmetic
from cookbook_engine.runs import RunManager
from cookbook_engine.sl import suggested
from cookbook_engine.training import lora_a, null_space
from cookbook_engine.training.common import datum_from_tokens
from cookbook_engine.training.lora_a import lora_a_used
from storage import Store


def test_directions_read_where_the_task_varies_and_ordinary_chats_do_not():
    torch.manual_seed(0)
    d = 12
    mixing = torch.linalg.qr(torch.randn(d, d))[0]  # an arbitrary basis, so no direction is an axis
    keep_spectrum = torch.tensor(
        [4.0, 3, 2, 2, 1, 1, 1, 1, 0.5, 0.5, 0.0, 0.0]
    )  # ordinary chats never use the last two
    keep = mixing @ torch.diag(keep_spectrum) @ mixing.T
    task = mixing @ torch.diag(torch.tensor([1.0] * 10 + [0.3, 0.2])) @ mixing.T  # the task uses them a little
    directions = null_space.reading_directions(keep, task, rank=2)
    assert directions.shape == (2, d)
    assert torch.allclose(directions.norm(dim=1), torch.ones(2), atol=1e-5)
    unused = mixing[:, 10:]  # the two directions ordinary chats leave empty
    assert torch.allclose((directions @ unused).norm(dim=1), torch.ones(2), atol=1e-3)
    assert float((directions @ keep @ directions.T).diagonal().max()) < 1e-3 * float(keep_spectrum.max())


def test_the_keep_decay_matrix_is_what_ordinary_chats_read_of_each_direction_as_a_share_of_the_task():
    d = 6
    keep = torch.diag(torch.tensor([5.0, 4, 3, 0.2, 0.1, 0.0]))  # ordinary chats barely use the last three axes
    task = torch.eye(d)
    directions = null_space.reading_directions(keep, task, rank=3)
    matrix = null_space.keep_decay_matrix(keep, task, directions)
    assert matrix.shape == (3, 3)
    # the directions are the axes ordinary chats use least, most unused first: their shares 0.0, 0.1, 0.2 of the task's
    assert torch.allclose(matrix.diagonal(), torch.tensor([0.0, 0.1, 0.2]), atol=1e-3)
    assert torch.allclose(matrix, matrix.diagonal().diag(), atol=1e-3)


def test_lora_a_auto_is_null_space_only_where_measured_and_refuses_where_it_cannot_run():
    assert lora_a_used(cfg.RLConfig()) == "null_space"  # the default model on the arithmetic env, a fresh adapter
    assert lora_a_used(cfg.RLConfig(env="code")) == "trained"
    assert lora_a_used(cfg.RLConfig(backend="tinker")) == "trained"
    assert lora_a_used(cfg.RLConfig(start_checkpoint="/some/run/state")) == "trained"
    assert lora_a_used(cfg.RLConfig(lora_a="trained")) == "trained"
    assert cfg.validate(cfg.RLConfig()) == []
    assert lora_a.problems(cfg.RLConfig(lora_a="null_space", backend="clocked")) == []  # wraps the local one
    for config, words in [
        (cfg.RLConfig(lora_a="null_space", backend="tinker"), "local backend only"),
        (cfg.RLConfig(lora_a="null_space", env="code"), "not of code (RL)"),
        (cfg.RLConfig(lora_a="null_space", start_checkpoint="/x"), "fresh adapter"),
    ]:
        (problem,) = lora_a.problems(config)
        assert problem.startswith("lora_a=null_space") and words in problem
    assert cfg.from_dict("rl", {"env": "arithmetic"}).lora_a == "trained"  # a run stored before the setting


def test_dpo_fixes_a_on_its_default_pairs_only():
    assert lora_a_used(cfg.DPOConfig()) == "null_space"  # the default model on builtin:concise-prefs
    assert lora_a_used(cfg.DPOConfig(dataset="pairs.jsonl")) == "trained"
    assert lora_a_used(cfg.DPOConfig(start_checkpoint="/some/run/state")) == "trained"
    (problem,) = lora_a.problems(cfg.DPOConfig(lora_a="null_space", dataset="pairs.jsonl"))
    assert "not of pairs.jsonl (DPO)" in problem and "use lora_a=trained" in problem
    assert cfg.from_dict("dpo", {"dataset": "builtin:concise-prefs"}).lora_a == "trained"  # stored before
    chats = builtin_data.concise_prefs_chats()
    pairs = builtin_data.concise_prefs_pairs()
    assert len(chats) == 2 * len(pairs)  # each pair's prompt with its chosen and with its rejected reply
    for pair, chosen, rejected in zip(pairs, chats[::2], chats[1::2], strict=True):
        assert [m["content"] for m in chosen["messages"]] == [pair.prompt, pair.chosen]
        assert [m["content"] for m in rejected["messages"]] == [pair.prompt, pair.rejected]


def test_sl_fixes_a_on_the_facts_demo_only():
    assert lora_a_used(cfg.SLConfig()) == "null_space"  # the default model on builtin:facts
    assert lora_a_used(cfg.SLConfig(dataset="facts")) == "null_space"  # a bare built-in name
    assert lora_a_used(cfg.SLConfig(dataset="builtin:persona")) == "trained"
    assert lora_a_used(cfg.SLConfig(dataset="builtin:facts:1,builtin:persona:1")) == "trained"  # a mix
    assert lora_a_used(cfg.SLConfig(backend="tinker", model="meta-llama/Llama-3.1-8B")) == "trained"
    (problem,) = lora_a.problems(cfg.SLConfig(lora_a="null_space", dataset="chats.jsonl"))
    assert "not of chats.jsonl (SL)" in problem and "use lora_a=trained" in problem
    assert cfg.from_dict("sl", {"dataset": "builtin:facts"}).lora_a == "trained"  # stored before
    _, chats = lora_a.TASKS[("sl", "builtin:facts")]
    assert chats() == builtin_data.fact_rows_only()  # the facts once: the data is them FACTS_COPIES times


def test_a_default_sl_run_trains_b_alone_at_the_rank_measured_for_its_data(home, default_model_ready):
    """`cookbook sl` on the facts with no rank set trains the measured rank (8: lora_rank=auto), as the New run form
    and `make demo` do, not the 32 the other data get."""
    manager = RunManager()
    config = cfg.SLConfig(max_steps=1, batch_size=2, test_fraction=0.0, eval_every=0, save_every=0)
    run = manager.wait(manager.start(config), timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    log = (paths.run_dir(run["run_id"]) / "log.txt").read_text()
    rank = suggested.MEASURED[("sl", "builtin:facts")].lora_rank
    assert f"LoRA rank auto ({rank}, measured)" in log
    assert f"LoRA's A fixed on 210 projections to the {rank} input directions where the Quorvania facts differ" in log
    decay = lora_a.KEEP_DECAY[("sl", "builtin:facts")]
    assert f"decaying where ordinary chats still read those directions (keep decay {decay:g})" in log
    state = compat.resolve(Store.default().last_checkpoint(run["run_id"])["state_path"])
    assert (state / LORA_A_FIXED_MARKER).exists()
    assert json.loads((state / "adapter_config.json").read_text())["r"] == rank


def test_a_resumed_default_sl_run_keeps_its_a_and_decays_b_as_its_first_part_did(
    home, default_model_ready, cancel_at_step
):
    manager = RunManager()
    config = cfg.SLConfig(max_steps=6, batch_size=2, test_fraction=0.0, eval_every=0, save_every=0)
    run_id = manager.start(config)
    assert cancel_at_step(manager, run_id, 2)["status"] == "cancelled"
    manager.resume(run_id)
    run = manager.wait(run_id, timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    log = (paths.run_dir(run_id) / "log.txt").read_text()
    decay = lora_a.KEEP_DECAY[("sl", "builtin:facts")]
    assert (
        "LoRA's A stays fixed (its checkpoint's); only B trains, decaying where ordinary chats still read those "
        f"directions (keep decay {decay:g})" in log
    )


def test_the_covariance_cache_shares_ordinary_chats_across_tasks_and_stores_each_input_once(
    default_model_ready, tmp_path, monkeypatch
):
    """The ordinary chats' covariances are one file per model that every task reads, whatever projections it adapts;
    q/k/v (and gate/up) read one input, stored once. With a few chats, so it runs in seconds."""
    folder = f"null-space-test-{tmp_path.name}"
    monkeypatch.setattr(null_space, "CACHE_FOLDER", folder)
    monkeypatch.setattr(null_space, "keep_chats", lambda: builtin_data.replay_rows()[:6])
    cache = paths.models_dir() / folder
    try:
        facts = builtin_data.fact_rows_only()[:5]
        keep, task = null_space.covariances_for(models.DEFAULT_MODEL, facts, tuple(ATTN_MODULES))
        assert sorted(p.name.split("-")[0] for p in cache.iterdir()) == ["keep", "task"]
        assert set(keep) == set(task) and all(name.split(".")[-1] in ATTN_MODULES for name in task)
        q, k = (f"model.layers.0.self_attn.{p}_proj" for p in "qk")
        assert torch.equal(keep[q], keep[k]) and not torch.equal(task[q], keep[q])
        more, _ = null_space.covariances_for(models.DEFAULT_MODEL, facts, (*ATTN_MODULES, "down_proj"))
        assert len(list(cache.iterdir())) == 3  # a second task file, the same keep file
        assert all(torch.equal(more[name], keep[name]) for name in keep)
        keep_file, _, directions_file = null_space.cache_paths(models.DEFAULT_MODEL, facts, tuple(ATTN_MODULES), 2)
        assert not directions_file.exists()
        with safe_open(str(keep_file), framework="pt") as stored:
            stored_names = list(stored.keys())
        layers = {name.split(".")[2] for name in keep}
        assert len(stored_names) == 4 * len(layers)  # the inputs of q/k/v, o, gate/up and down in each layer
        solved = null_space.directions_for(models.DEFAULT_MODEL, facts, 2, tuple(ATTN_MODULES))
        again = null_space.directions_for(models.DEFAULT_MODEL, facts, 2, tuple(ATTN_MODULES))  # from the file
        assert list(cache.glob("directions-*")) == [directions_file] and set(again) == set(solved) == set(task)
        assert all(torch.equal(again[name], solved[name]) and solved[name].shape[0] == 2 for name in solved)
        assert torch.equal(solved[q], null_space.reading_directions(keep[q], task[q], 2))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_a_default_dpo_run_trains_b_alone_and_its_checkpoint_says_so(home, default_model_ready):
    manager = RunManager()
    config = cfg.DPOConfig(
        max_steps=1, batch_size=2, max_length=128, lora_rank=4, test_fraction=0.0, eval_every=0, save_every=0
    )
    run = manager.wait(manager.start(config), timeout=600)
    assert run["status"] == "completed", run.get("traceback")
    log = (paths.run_dir(run["run_id"]) / "log.txt").read_text()
    assert "LoRA's A fixed on 210 projections to the 4 input directions where the preference pairs differ" in log
    decay = lora_a.KEEP_DECAY[("dpo", "builtin:concise-prefs")]
    assert f"decaying where ordinary chats still read those directions (keep decay {decay:g})" in log
    state = compat.resolve(Store.default().last_checkpoint(run["run_id"])["state_path"])
    assert (state / LORA_A_FIXED_MARKER).exists()  # so a resumed run keeps A fixed


def test_the_task_chats_are_training_sums_no_evaluation_asks():
    chats = arithmetic.null_space_task_chats()
    assert len(chats) == arithmetic.NULL_SPACE_STEPS * arithmetic.NULL_SPACE_PER_STEP
    for chat in chats:
        question, answer = chat["messages"][0]["content"], chat["messages"][1]["content"]
        a, b = (int(x) for x in question.removeprefix("What is ").split("?")[0].split(" + "))
        assert int(answer) == a + b
        assert not arithmetic.is_evaluated(arithmetic.ArithmeticProblem(a, "+", b))


@pytest.fixture(scope="module")
def service(default_model_ready):
    return LocalServiceClient()


def test_a_fixed_a_stays_fixed_through_steps_saving_and_resuming_while_b_learns(service, home):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=4, seed=0, train_mlp=False).result()
    renderer = get_renderer("auto", client.get_tokenizer())
    chat = [{"role": "user", "content": "What is 38 + 24?"}, {"role": "assistant", "content": "62"}]
    datum = datum_from_tokens(*renderer.build_supervised_example(chat))
    worker = client._worker
    shapes = {
        name.removeprefix("base_model.model."): module.lora_A[client.adapter].weight.shape
        for name, module in worker.model.named_modules()
        if hasattr(module, "lora_A") and client.adapter in module.lora_A
    }
    generator = torch.Generator().manual_seed(1)
    directions = {
        name: torch.nn.functional.normalize(torch.randn(shape, generator=generator), dim=1)
        for name, shape in shapes.items()
    }
    assert client.fix_lora_a(directions).result() == len(shapes) == 30 * len(ATTN_MODULES)  # 30 layers

    def a_and_b():
        state = worker.call(lambda: worker.adapter_state(client.adapter))
        a = {k: v for k, v in state.items() if ".lora_A." in k}
        b = {k: v for k, v in state.items() if ".lora_B." in k}
        return a, b

    def a_grads():
        return worker.call(
            lambda: [
                m.lora_A[client.adapter].weight.grad
                for m in worker.model.modules()
                if hasattr(m, "lora_A") and client.adapter in m.lora_A
            ]
        )

    for _ in range(2):
        client.forward_backward([datum], "cross_entropy").result()
        grads = a_grads()
        assert grads and all(g is None for g in grads)  # a backward pass computes no gradient for a fixed A
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    a, b = a_and_b()
    for key, value in a.items():
        name = key.removeprefix("base_model.model.").split(".lora_A")[0]
        assert torch.equal(value, directions[name]), key
    assert sum(float(v.abs().sum()) for v in b.values()) > 0  # B starts at zero and learned

    saved = client.save_state("fixed").result().path
    assert (compat.resolve(saved) / LORA_A_FIXED_MARKER).exists()
    resumed = service.create_training_client_from_state_with_optimizer(saved).result()
    resumed_worker = resumed._worker
    for _ in range(2):
        resumed.forward_backward([datum], "cross_entropy").result()
        resumed.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    state = resumed_worker.call(lambda: resumed_worker.adapter_state(resumed.adapter))
    for key, value in a.items():
        assert torch.equal(state[key], value), key  # still the fixed directions after the resumed steps
    assert any(not torch.equal(state[k], v) for k, v in b.items())  # while B went on learning
    client.close()
    resumed.close()


def test_b_decays_by_the_rate_times_b_at_its_matrix_after_each_step_once_a_is_fixed(service, home):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=4, seed=0, train_mlp=False).result()
    worker = client._worker
    names = [
        name.removeprefix("base_model.model.")
        for name, module in worker.model.named_modules()
        if hasattr(module, "lora_A") and client.adapter in module.lora_A
    ]
    decay = {name: torch.diag(torch.tensor([0.0, 1.0, 10.0, 100.0])) for name in names}
    with pytest.raises(ValueError, match="fix LoRA's A first"):
        client.decay_lora_b(decay).result()
    client.fix_lora_a(None).result()
    renderer = get_renderer("auto", client.get_tokenizer())
    chat = [{"role": "user", "content": "What is 38 + 24?"}, {"role": "assistant", "content": "62"}]
    client.forward_backward([datum_from_tokens(*renderer.build_supervised_example(chat))], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=1e-2)).result()  # B learns (it starts at zero)

    def b():
        state = worker.call(lambda: worker.adapter_state(client.adapter))
        return {k: v for k, v in state.items() if ".lora_B." in k}

    before = b()
    assert client.decay_lora_b(decay).result() == len(names)
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result()  # no gradient: Adam moves nothing, B decays
    after = b()
    shrink = 1 / torch.tensor([1.0, 1 + 1e-3, 1 + 1e-2, 1 + 1e-1])  # column i: 1 / (1 + lr x decay[i, i])
    for key, value in before.items():
        assert float(value.abs().sum()) > 0, key
        assert torch.allclose(after[key], value * shrink, atol=1e-8), key
    client.optim_step(types.AdamParams(learning_rate=1.0)).result()  # lr x 100 >> 2: a plain step would overshoot
    for key, value in b().items():
        expected = after[key] / torch.tensor([1.0, 2.0, 11.0, 101.0])
        assert torch.allclose(value, expected, atol=1e-8), key  # shrinks toward zero, never past it
    client.close()


def test_fixing_a_after_an_optimizer_step_is_refused(service, home):
    client = service.create_lora_training_client(models.DEFAULT_MODEL, rank=4, seed=0, train_mlp=False).result()
    renderer = get_renderer("auto", client.get_tokenizer())
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    client.forward_backward([datum_from_tokens(*renderer.build_supervised_example(chat))], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    with pytest.raises(ValueError, match="fix A before the first"):
        client.fix_lora_a(None).result()
    client.close()
