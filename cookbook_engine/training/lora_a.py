"""Which runs fix LoRA's input side A (`lora_a`), on which task's chats, and the step that fixes it: the one home of
lora_a=auto's rule for every kind of run.

`lora_a=null_space` fixes a fresh adapter's A to the input directions where the task's chats differ most from
ordinary chats, and trains B alone (training/null_space.py computes the directions; the local backend fixes them,
backends/local.py `fix_lora_a`); on a task with a KEEP_DECAY, B also decays each step where ordinary chats still read
those directions (`decay_lora_b`). It needs chats that stand for the task, so it runs on tasks this module knows
(TASKS): RL's arithmetic env, DPO's `builtin:concise-prefs` and SL's `builtin:facts`. `auto` is the measured choice:
null_space where it was measured to keep more of the model's ordinary answers with as much learned
(rl/suggested.py, sl/suggested.py), trained everywhere else. Not here: the measurements, the directions' maths, the
loops.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from cookbook_engine import paths

LORA_A = ("auto", "trained", "null_space")  # the choices of the lora_a setting; auto: lora_a_used
DEFAULT_LORA_RANK = 32  # lora_rank=auto where no rank was measured for the data (rank_used)


def _arithmetic_chats() -> list[dict]:
    from cookbook_engine.rl import arithmetic

    return arithmetic.null_space_task_chats()


def _facts_chats() -> list[dict]:
    from cookbook_engine.data import builtin

    return builtin.fact_rows_only()


def _concise_prefs_chats() -> list[dict]:
    from cookbook_engine.data import builtin

    return builtin.concise_prefs_chats()


# (kind, task) -> (the task in words, its chats): the tasks whose chats null_space can read.
TASKS: dict[tuple[str, str], tuple[str, Callable[[], list[dict]]]] = {
    ("rl", "arithmetic"): ("sums", _arithmetic_chats),
    ("dpo", "builtin:concise-prefs"): ("the preference pairs", _concise_prefs_chats),
    ("sl", "builtin:facts"): ("the Quorvania facts", _facts_chats),
}

# (kind, task) -> how strongly B decays where ordinary chats read A's fixed directions (null_space.keep_decay_matrices,
# the local backend's decay_lora_b: B <- B (I + lr x KEEP_DECAY x M)^-1 after each step). Measured on a 2-core AMD
# EPYC in fp32, where the base model answers all 322 retention questions (docs/DEFAULTS.md, lost of 322):
# - the SFT demo's facts (2026-12-01, seeds 0 and 1): 0 lost 12 and 12 (the founding year 8 and 10 of 10), 2000
#   lost 7 and 10 (the year 6 and 9), 4000 lost 5 (the year 2), 6000 lost 4 (the year 0): it trades the one number
#   among the facts for ordinary answers. With the facts four times at lr 1e-3 (the demo since 2026-12-02; a 2-core
#   Intel Xeon with AMX, bf16, where the base misses 4 of the 322), 2000 lost 4 and 3 and gained 3 and 2, every fact
#   9 or 10 of 10.
# - DPO's pairs (2026-12-02, seed 0; own kinds on prefs-style-controlled): 0 lost 12 (0.928), 1500 lost 1 (0.928),
#   4000 lost 0 (0.887).
# - RL's sums (2026-12-02; held-out fresh sums): 0 with the anchor (the default until then) lost 4 (0.700) in 11
#   minutes; 2000 without the anchor lost 0 and 0 (0.700 and 0.695, seeds 0 and 1) in 7 and 6.
KEEP_DECAY: dict[tuple[str, str], float] = {
    ("sl", "builtin:facts"): 2000.0,
    ("dpo", "builtin:concise-prefs"): 1500.0,
    ("rl", "arithmetic"): 2000.0,
}


def task_of(config) -> tuple[str, str]:
    """(kind, task): the env for RL, the dataset (built-in ones as `builtin:NAME`) for the other kinds."""
    from cookbook_engine.sl.suggested import builtin_spec

    if config.kind == "rl":
        return ("rl", config.env)
    return (config.kind, builtin_spec(getattr(config, "dataset", "").strip()))


def lora_a_used(config) -> str:
    """ "trained" or "null_space": a set lora_a wins; auto is the measured choice where one was measured for this
    kind, model and task, from a fresh adapter (a start checkpoint's A was trained), and trained elsewhere."""
    chosen = getattr(config, "lora_a", "trained")
    if chosen != "auto":
        return chosen
    from cookbook_engine.rl import suggested as rl_suggested
    from cookbook_engine.sl import suggested as sl_suggested

    measured = rl_suggested.measured_for(config) if config.kind == "rl" else sl_suggested.measured_for(config)
    fresh = not getattr(config, "start_checkpoint", "").strip()  # SL always starts fresh
    return measured.lora_a if measured and fresh else "trained"


def rank_used(config) -> int:
    """The LoRA rank a run of `config` trains: a set lora_rank wins; auto is the rank measured for this SL config's
    data with the lora_a it resolves to (sl/suggested.py: the facts with A fixed, 8), else DEFAULT_LORA_RANK."""
    if config.lora_rank is not None:
        return config.lora_rank
    return _measured_rank(config) or DEFAULT_LORA_RANK


def _measured_rank(config) -> int | None:
    from cookbook_engine.sl import suggested as sl_suggested

    return sl_suggested.rank_for(config, lora_a_used(config))


def rank_note(config) -> str:
    """The words for the rank a run trains, for its log, its settings and the form's auto option: "16" where set,
    "auto (8, measured)", "auto (32)", "the start checkpoint's" (a run from one trains the rank it was saved with)."""
    if getattr(config, "start_checkpoint", "").strip():
        return "the start checkpoint's"
    if config.lora_rank is not None:
        return str(config.lora_rank)
    measured = _measured_rank(config)
    return f"auto ({measured}, measured)" if measured else f"auto ({rank_used(config)})"


def problems(config) -> list[str]:
    """lora_a=null_space needs what it reads from: this machine's weights (the local backend, or the clocked one that
    wraps it; the tinker SDK has no call that fixes A), a task whose chats it knows and a fresh adapter."""
    if lora_a_used(config) != "null_space":
        return []
    if config.backend not in ("local", "clocked"):
        return [
            f"lora_a=null_space: runs on the local backend only (backend={config.backend}: the Tinker API has no "
            "call that fixes LoRA's A); use lora_a=trained"
        ]
    if task_of(config) not in TASKS:
        kind, task = task_of(config)
        known = ", ".join(f"{task} ({kind.upper()})" for kind, task in TASKS)
        return [
            f"lora_a=null_space: knows the chats of {known}, not of {task or 'no dataset'} ({kind.upper()}); "
            "use lora_a=trained"
        ]
    if getattr(config, "start_checkpoint", "").strip():
        return ["lora_a=null_space: starts from a fresh adapter, not start_checkpoint; use lora_a=trained"]
    return []


def modules(config) -> tuple[str, ...]:
    """The projections the run's LoRA adapts."""
    from cookbook_engine.backends.local import ATTN_MODULES, MLP_MODULES
    from cookbook_engine.rl.suggested import train_mlp_used

    return tuple(ATTN_MODULES if config.train_attn else ()) + tuple(MLP_MODULES if train_mlp_used(config) else ())


@functools.lru_cache(maxsize=8)
def _cache_files(model: str, task: tuple[str, str], projections: tuple[str, ...], rank: int) -> tuple:
    from cookbook_engine.training import null_space

    return null_space.cache_paths(model, TASKS[task][1](), projections, rank)  # tokenizes ~800 chats


def null_space_missing(config) -> tuple[bool, bool, bool]:
    """What a run of `config` computes first for null_space, for the New run estimate: (the ordinary chats'
    covariances, once per model for every task; the task's, once per task and projections; the directions, once per
    task, projections and rank). All False when A trains."""
    from cookbook_engine.training import null_space

    if lora_a_used(config) != "null_space" or problems(config):
        return (False, False, False)
    files = _cache_files(config.model, task_of(config), modules(config), rank_used(config))
    folder = paths.models_dir() / null_space.CACHE_FOLDER  # read now: the cached paths may predate a moved cache
    keep, task, directions = (not (folder / file.name).exists() for file in files)
    return (keep, task, directions)


async def fix_for_run(config, client, resumed: bool) -> str:
    """lora_a=null_space: a fresh adapter's A fixed to the directions where the task's chats differ most from
    ordinary chats, so only B trains (a resumed run's checkpoint keeps its A fixed itself); and where the task has a
    KEEP_DECAY, B decays each step where ordinary chats still read those directions, resumed runs included. Returns
    the log's note, or "" when A trains."""
    if lora_a_used(config) != "null_space":
        return ""
    from cookbook_engine.training import null_space

    words, chats = TASKS[task_of(config)]
    rank, projections = rank_used(config), modules(config)
    started = time.perf_counter()
    note = "LoRA's A stays fixed (its checkpoint's); only B trains"
    if not resumed:
        directions = await asyncio.to_thread(null_space.directions_for, config.model, chats(), rank, projections)
        fixed = await asyncio.to_thread(lambda: client.fix_lora_a(directions).result())
        note = (
            f"LoRA's A fixed on {fixed} projections to the {rank} input directions where {words} differ most from "
            "ordinary chats; only B trains"
        )
    decay = KEEP_DECAY.get(task_of(config), 0.0)
    if decay:
        matrices = await asyncio.to_thread(null_space.keep_decay_matrices, config.model, chats(), rank, projections)
        scaled = {name: decay * matrix for name, matrix in matrices.items()}
        await asyncio.to_thread(lambda: client.decay_lora_b(scaled).result())
        note += f", decaying where ordinary chats still read those directions (keep decay {decay:g})"
    elif resumed:
        return ""
    return f"{note} (lora_a=null_space, {time.perf_counter() - started:.0f} s)"
