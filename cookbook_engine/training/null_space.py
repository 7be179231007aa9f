"""LoRA that reads only what ordinary chats do not use (`lora_a=null_space`): LoRA's input side A is fixed, for each
adapted projection, to the `rank` input directions where the task's inputs differ most from ordinary chats' inputs,
and only B trains. The update B A x is then small wherever x looks like an ordinary chat, so what the model answers to
ordinary questions stays as it was by construction rather than by what a replay set happens to rehearse (AlphaEdit,
Fang et al. 2025, and LoRA-Null: an update in the null space of preserved knowledge's activations).

The directions: C_keep = the base model's mean x x^T over the reply and prompt tokens of ordinary chats (the base
model's own replies to ordinary questions, `builtin.replay_rows()` and `builtin.neighbour_rows()`), C_task = the same
over the task's chats; A's rows are the generalised eigenvectors of (C_task, C_keep + ridge x mean eigenvalue x I)
with the largest ratio, each of unit length. The covariances are computed in fp32 on a separate copy of the base
model and cached in the model cache, keyed by the model, the projections and every token they were computed from:
C_keep once per model for every adaptable projection (about 2 minutes on a 2-core CPU for the default model, its
chats batched by length), so every task and choice of projections shares it, and C_task once per task (tens of
seconds); each input's covariance is stored once however many projections read it (q/k/v, gate/up). The directions
follow from them (about 40 s for all seven projections, once per rank: cached too).

The ratio picks A's rows, yet ordinary inputs still reach them: in the SFT demo's directions ordinary chats (and the
retention questions alike) carry about 0.2-6% of the task's energy per direction. `keep_decay_matrices` measures
that share per direction (A C_keep A^T over the task's mean), for the local backend's `decay_lora_b`: B shrinks
each step where ordinary chats read A, by the task's KEEP_DECAY (training/lora_a.py).

Measured (issue 23, docs/DEFAULTS.md): the RL arithmetic default learns its sums as before and the DPO default its
own kinds of pairs; with the decay as well both keep the base model's ordinary answers within the interval of zero in
fp32 (RL 0 of 322 lost on two seeds, DPO 1), where the fixed A alone lost 4 and 12. The SFT demo still loses 7-10.
Not here: which runs use it and on which task's chats (training/lora_a.py), the local backend's fixing of A
(backends/local.py `fix_lora_a`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cookbook_engine import models, paths, renderers

if TYPE_CHECKING:
    import torch

RIDGE = 1e-3  # x the mean eigenvalue of C_keep: 1e-4 broke the SFT demo's model, 3e-3 kept less (benchmarks/README.md)
CACHE_FOLDER = "null-space"


def keep_chats() -> list[dict]:
    """Ordinary chats whose inputs the update must leave alone: the base model's own replies to ordinary questions
    (none asks a `builtin:retention` question)."""
    from cookbook_engine.data import builtin

    return builtin.replay_rows() + builtin.neighbour_rows()


def rendered(rows: list[dict], renderer) -> list[list[int]]:
    """Each chat's tokens (prompt and reply) as the training renderer writes them."""
    out = []
    for row in rows:
        tokens = renderer.build_supervised_example(row["messages"], "last_assistant_message")[0]
        out.append(list(tokens.to_ints()) if hasattr(tokens, "to_ints") else list(tokens))
    return out


@contextlib.contextmanager
def reading_inputs(model, modules: tuple[str, ...], on_input: Callable[[str, torch.Tensor], None]):
    """Forward hooks on the linear projections whose last name is in `modules`: each forward pass calls
    `on_input(projection, x)` once per distinct input tensor x (q/k/v and gate/up read one tensor: only the first of
    them is named). Yields (reader_of, new_pass): reader_of maps each projection to the first one that read its input,
    and new_pass() must be called before each forward pass. The hooks are removed on leaving."""
    import torch

    reader_of: dict[str, str] = {}  # projection -> the first projection that reads the same input
    first_reader: dict[int, str] = {}  # an input tensor's address -> the first projection that read it this pass
    inputs: dict[int, torch.Tensor] = {}  # kept so an address is not reused within the pass
    hooks = []
    for name, module in model.named_modules():
        if name.split(".")[-1] in modules and isinstance(module, torch.nn.Linear):

            def hook(_module, args, _out, name=name):
                key = args[0].data_ptr()
                if key not in first_reader:
                    first_reader[key], inputs[key] = name, args[0]
                    on_input(name, args[0])
                reader_of[name] = first_reader[key]

            hooks.append(module.register_forward_hook(hook))

    def new_pass() -> None:
        first_reader.clear()
        inputs.clear()

    try:
        yield reader_of, new_pass
    finally:
        for h in hooks:
            h.remove()


def padded_inputs(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids_B_T, mask_B_T) of the chats' tokens as training reads them (the last token is only a target), padded on
    the right to the longest."""
    import torch

    width = max(len(t) for t in batch) - 1
    ids_B_T = torch.full((len(batch), width), pad, dtype=torch.long)
    mask_B_T = torch.zeros(len(batch), width, dtype=torch.long)
    for b, tokens_T in enumerate(batch):
        ids_B_T[b, : len(tokens_T) - 1] = torch.tensor(tokens_T[:-1])
        mask_B_T[b, : len(tokens_T) - 1] = 1
    return ids_B_T, mask_B_T


def input_covariances(
    model, token_lists: list[list[int]], pad: int, modules: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """Per projection whose last name is in `modules`: the mean over every real token of x x^T of its input x.
    Projections that read one tensor (q/k/v, gate/up) get the same tensor object: it is computed and stored once."""
    import torch

    sums: dict[str, torch.Tensor] = {}
    mask_now: list[torch.Tensor] = []

    def add(name: str, x: torch.Tensor) -> None:
        x = x.float()[mask_now[0].bool()]
        sums[name] = sums.get(name, 0) + x.T @ x

    tokens = 0
    with reading_inputs(model, modules, add) as (reader_of, new_pass), torch.no_grad():
        by_length = sorted(token_lists, key=len)  # batches of like lengths: little compute spent on padding
        for start in range(0, len(by_length), 8):
            ids_B_T, mask_B_T = padded_inputs(by_length[start : start + 8], pad)
            mask_now[:] = [mask_B_T]
            new_pass()
            model.model(input_ids=ids_B_T, attention_mask=mask_B_T)  # the LM head's input is not needed
            tokens += int(mask_B_T.sum())
    means = {name: total / tokens for name, total in sums.items()}
    return {name: means[reader] for name, reader in reader_of.items()}


def reading_directions(keep: torch.Tensor, task: torch.Tensor, rank: int, ridge: float = RIDGE) -> torch.Tensor:
    """The `rank` input directions (unit rows, the largest ratio first) maximising v^T task v / v^T (keep + ridge x
    mean eigenvalue of keep) v."""
    import torch

    d = keep.shape[0]
    keep = keep.double() + ridge * torch.trace(keep).double() / d * torch.eye(d, dtype=torch.float64)
    values, vectors = torch.linalg.eigh(keep)
    whiten = vectors / values.sqrt()  # W^T keep W = I
    _, ratio_vectors = torch.linalg.eigh(whiten.T @ task.double() @ whiten)
    directions = (whiten @ ratio_vectors[:, -rank:]).T  # rank x d, largest ratios last
    return (directions / directions.norm(dim=1, keepdim=True)).float().flip(0)


def keep_decay_matrix(keep: torch.Tensor, task: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """rank x rank: A C_keep A^T over the mean task energy per direction (tr(A C_task A^T) / rank), so its diagonal is
    how much ordinary chats read each of A's rows, as a share of what the task reads (about 0.002-0.08 for the SFT
    demo's directions: the ratio picks them, yet ordinary inputs still reach them)."""
    import torch

    a = directions.double()
    keep_energy = a @ keep.double() @ a.T
    task_energy = torch.trace(a @ task.double() @ a.T) / a.shape[0]
    return (keep_energy / task_energy).float()


def keep_decay_matrices(
    model_name: str, task_chats: list[dict], rank: int, modules: tuple[str, ...], ridge: float = RIDGE
) -> dict[str, torch.Tensor]:
    """{projection name: keep_decay_matrix} for directions_for's directions: what the local backend's
    `decay_lora_b` shrinks B by each step (times the rate and the task's decay coefficient, training/lora_a.py), so B
    stays small on the columns whose direction ordinary chats read. Cached beside the directions, keyed as they are."""
    keep_input, task_input = _inputs(model_name, task_chats, modules)
    cached = _cache_file("keep-decay", _directions_file(keep_input[0], task_input[0], rank, ridge).name)
    if cached.exists():
        return _load(cached)
    directions = directions_for(model_name, task_chats, rank, modules, ridge)
    keep, task = _covariances(model_name, keep_input, task_input, modules)
    matrices = _per_shared_input(keep, task, lambda name: keep_decay_matrix(keep[name], task[name], directions[name]))
    _save(matrices, cached)
    return matrices


def _per_shared_input(keep: dict, task: dict, solve: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
    """{projection: solve(projection)}, solved once per input that projections share (q/k/v, gate/up read one
    tensor, so their covariances are one object): the projections that share it get the same result object."""
    solved: dict[tuple[int, int], torch.Tensor] = {}
    for name in task:
        inputs = (id(keep[name]), id(task[name]))
        if inputs not in solved:
            solved[inputs] = solve(name).contiguous()
    return {name: solved[(id(keep[name]), id(task[name]))] for name in task}


def directions_for(
    model_name: str, task_chats: list[dict], rank: int, modules: tuple[str, ...], ridge: float = RIDGE
) -> dict[str, torch.Tensor]:
    """{projection name ("model.layers.0.self_attn.q_proj"): A (rank x d_in)} for the base model `model_name`.
    Projections that read one input (q/k/v, gate/up) share their covariances, so their directions are solved once;
    the result is cached beside the covariances (solving takes about 40 s for all seven projections of the default
    model, mostly the MLP's down projection), keyed by them, the rank and the ridge."""
    keep_input, task_input = _inputs(model_name, task_chats, modules)  # tokenized once (each is a second)
    cached = _directions_file(keep_input[0], task_input[0], rank, ridge)
    if cached.exists():
        return _load(cached)
    keep, task = _covariances(model_name, keep_input, task_input, modules)
    directions = _per_shared_input(keep, task, lambda name: reading_directions(keep[name], task[name], rank, ridge))
    _save(directions, cached)
    return directions


@functools.lru_cache(maxsize=4)
def _tokenizer(model_name: str):
    """The model's tokenizer, loaded once per process: every cache file's name tokenizes the chats it covers."""
    return models.load_tokenizer(model_name)


def _tokens(model_name: str, chats: list[dict]) -> list[list[int]]:
    """The chats' tokens as the training renderer writes them."""
    tokenizer = _tokenizer(model_name)
    return rendered(chats, renderers.get_renderer("auto", tokenizer))


def _cache_file(prefix: str, *keyed) -> Path:
    key = hashlib.sha256(json.dumps(keyed).encode()).hexdigest()[:24]
    return paths.models_dir() / CACHE_FOLDER / f"{prefix}-{key}.safetensors"


CachedInput = tuple[Path, list[list[int]]]  # a covariance file and the tokens it is computed from


def _inputs(model_name: str, task_chats: list[dict], modules: tuple[str, ...]) -> tuple[CachedInput, CachedInput]:
    """The keep chats' covariance file and tokens (one file per model, every adaptable projection, so every task and
    choice of projections shares it), and the task chats' (per task and projections)."""
    model = models.canonical_name(model_name)
    keep_tokens = _tokens(model_name, keep_chats())
    task_tokens = _tokens(model_name, task_chats)
    return (
        (_cache_file("keep", model, keep_tokens), keep_tokens),
        (_cache_file("task", model, sorted(modules), task_tokens), task_tokens),
    )


def _directions_file(keep_file: Path, task_file: Path, rank: int, ridge: float) -> Path:
    return _cache_file("directions", keep_file.name, task_file.name, rank, ridge)


def cache_paths(
    model_name: str, task_chats: list[dict], modules: tuple[str, ...], rank: int, ridge: float = RIDGE
) -> tuple[Path, Path, Path]:
    """The files a run's directions come from, each present once computed: the keep chats' covariances, the task
    chats' and the directions solved from them for this rank and ridge."""
    (keep_file, _), (task_file, _) = _inputs(model_name, task_chats, modules)
    return keep_file, task_file, _directions_file(keep_file, task_file, rank, ridge)


def _save(covariances: dict[str, torch.Tensor], path: Path) -> None:
    """Each distinct tensor once (q/k/v and gate/up share theirs), with which projection reads which in the metadata;
    written whole or not at all, since two processes may compute it at once."""
    from safetensors.torch import save_file

    stored: dict[int, str] = {}
    for name, tensor in covariances.items():
        stored.setdefault(id(tensor), name)
    readers = {name: stored[id(tensor)] for name, tensor in covariances.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    tensors = {name: covariances[name].contiguous() for name in set(readers.values())}
    save_file(tensors, str(partial), metadata={"readers": json.dumps(readers)})
    partial.replace(path)  # a reader never sees half a file


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as stored:
        readers = json.loads(stored.metadata()["readers"])
        tensors = {name: stored.get_tensor(name) for name in set(readers.values())}
    return {name: tensors[reader] for name, reader in readers.items()}


def covariances_for(
    model_name: str, task_chats: list[dict], modules: tuple[str, ...]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(C_keep, C_task) per projection, from the model cache when computed before from the same tokens (they do not
    depend on the rank or the ridge). C_keep is computed once per model for every adaptable projection, so RL's
    attention-only runs, DPO's and SFT's read the same file; C_task once per task and choice of projections."""
    return _covariances(model_name, *_inputs(model_name, task_chats, modules), modules)


def _covariances(
    model_name: str, keep_input: CachedInput, task_input: CachedInput, modules: tuple[str, ...]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    from cookbook_engine.backends.local import ATTN_MODULES, MLP_MODULES

    tokenizer = _tokenizer(model_name)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    (keep_file, keep_tokens), (task_file, task_tokens) = keep_input, task_input
    if not (keep_file.exists() and task_file.exists()):
        model = models.load_model(model_name)  # fp32, its own copy: the run's model may be in bf16 and is adapted
        if not keep_file.exists():
            _save(input_covariances(model, keep_tokens, pad, (*ATTN_MODULES, *MLP_MODULES)), keep_file)
        if not task_file.exists():
            _save(input_covariances(model, task_tokens, pad, modules), task_file)
        del model
    task = _load(task_file)
    keep = _load(keep_file)
    return {name: keep[name] for name in task}, task
