"""How long a local run will take, said before it starts (the New run form's estimate): the steps, and what the steps
leave out, each from this machine's measured speeds (speed.py) and the run's own plan (its loop's `plan()`).

A run's time is more than its steps. Measured on the default model (issue 27: "the estimate said 1.6 min for a run
of 2 min 16 s"; benchmarks/estimate_vs_actual.py): the estimate counted neither RL's held-out evaluations (32
problems at step 0, every eval_every steps and at the end: a quarter of a 12-step arithmetic run), nor the
checkpoint saves, nor the named eval sets, and it counted SL's evaluations one short when eval_every does not divide
the steps. `run_time` counts each:

- loading: the model, the renderer and the data before the first step (STARTUP_S), and for a run with
  lora_a=null_space whose covariances are not in the model cache yet, computing them (NULL_SPACE_FIRST_S once per
  model, NULL_SPACE_TASK_S once per task) and solving their directions (NULL_SPACE_SOLVE_S once per task and rank);
- steps: SL and DPO train their batches' tokens (DPO also scores them under the reference model); RL and
  distillation sample every reply, counted at max_tokens, as groups and train on them (distillation also scores
  them under the teacher); prompt distillation samples the teacher's replies once, then trains on them as SL;
- evaluations, at step 0, every eval_every steps and at the end: SL's and DPO's held-out split (scored), RL's
  held-out problems (one reply each), and the named eval sets (one reply per example, or scored for NLL sets);
- checkpoint saves: every save_every steps and the final one (SAVE_S each);
- an anchor (anchor.dataset=, training/anchor.py), in the steps: `anchor.rows` chats trained every step, each chat
  scored by the base model the first time a step uses it (a sampling prefill and a top-K pass).

The speeds come from a short synthetic calibration, which misjudged real runs by up to 2x either way (a busy
machine, SL's steps taking 1.5x the calibrated per-token rate; benchmarks/README.md). So each run that completes on
the local backend records its measured seconds per step beside what this estimate said per step (`record_finished`,
into the studio's storage, by host, model, kind, dtype and batch shape), and the next estimate for a run like it is
scaled by the median measured/estimated ratio of the newest similar runs (`correction`): runs of the same shape when
there are some, else of any shape.

Not here: formatting and the note on other runs sharing the CPU (app/forms.py), the live time left of a running
run (speed.eta_seconds), hosted (Tinker) runs.
"""

from __future__ import annotations

import dataclasses
import socket
import statistics
from dataclasses import dataclass

from cookbook_engine import device, models, speed
from cookbook_engine.config import CommonConfig, DistillConfig, RLConfig
from cookbook_engine.training.plan import LoopPlan

STARTUP_S = 10.0  # the model (when this process has not loaded it yet), renderer and data, before the first step
# lora_a=null_space's ordinary chats' covariances for every projection, once per model (DPO's default computed them
# with its own task's in 4.5 min on a 2-core CPU, 2026-11-29), and a task's own, once per task (the facts over the MLP
# with the fp32 copy loaded: 70 s)
NULL_SPACE_FIRST_S = 180.0
NULL_SPACE_TASK_S = 70.0
# and the directions solved from them, once per task, projections and rank (an eigendecomposition per distinct input:
# the MLP's down projection reads 1536 wide, the rest 576; measured alone on the 2-core Intel Xeon, 2026-11-29: all
# seven projections 38.5 s, attention only 4.1 s)
NULL_SPACE_SOLVE_S = {"mlp": 40.0, "attention": 4.0}
SAVE_S = 4.0  # one checkpoint: the adapter, the optimizer state and the sampler weights (measured: 4 s under load)
NLL_EXAMPLE_TOKENS = 64  # an NLL eval set's example, for the estimate (its tokens are not counted ahead)
SAMPLING_KINDS = ("rl", "distill")
SIMILAR_RUNS = 5  # the correction is the median ratio of the newest this many similar finished runs


@dataclass(frozen=True)
class RunTime:
    """Seconds a run will take, by part."""

    loading: float
    steps: float
    evaluations: float
    saves: float
    num_evaluations: int
    num_saves: int
    directions: float = 0.0  # of `loading`: lora_a=null_space's covariances, computed once per model

    @property
    def total(self) -> float:
        return self.loading + self.steps + self.evaluations + self.saves

    def parts(self) -> str:
        """'steps 3 min 10 s, 6 evaluations 45 s, 3 checkpoint saves 12 s, loading 10 s'."""
        parts = [f"steps {speed.clock(self.steps)}"]
        if self.num_evaluations:
            s = "s" if self.num_evaluations != 1 else ""
            parts.append(f"{self.num_evaluations} evaluation{s} {speed.clock(self.evaluations)}")
        s = "s" if self.num_saves != 1 else ""
        parts.append(f"{self.num_saves} checkpoint save{s} {speed.clock(self.saves)}")
        directions = f" (of it {speed.clock(self.directions)} for LoRA's null-space directions, once)"
        parts.append(f"loading {speed.clock(self.loading)}" + (directions if self.directions else ""))
        return ", ".join(parts)

    def scaled(self, ratio: float) -> RunTime:
        """Every part times `ratio` (what similar runs measured against their estimates)."""
        return dataclasses.replace(
            self,
            loading=self.loading * ratio,
            steps=self.steps * ratio,
            evaluations=self.evaluations * ratio,
            saves=self.saves * ratio,
            directions=self.directions * ratio,
        )


def evaluation_points(config: CommonConfig, total_steps: int) -> int:
    """How often the loop evaluates: before steps 0, eval_every, 2*eval_every, ... and once at the end."""
    periodic = -(-total_steps // config.eval_every) if config.eval_every else 0
    return periodic + 1


def save_points(config: CommonConfig, total_steps: int) -> int:
    """Checkpoints the loop saves: after every save_every steps (not the last) and the final one."""
    periodic = (total_steps - 1) // config.save_every if config.save_every and total_steps else 0
    return periodic + 1


def run_time(config: CommonConfig, prepared: object, plan: LoopPlan, rate: speed.Speeds) -> RunTime:
    """The seconds a local run of `config` takes on this machine, by part (see the module docstring)."""
    steps = step_seconds(config, prepared, plan, rate) + anchor_seconds(config, rate, plan.total_steps)
    per_evaluation = held_out_seconds(config, prepared, rate) + named_sets_seconds(config, rate)
    evaluations = evaluation_points(config, plan.total_steps) if per_evaluation else 0
    saves = save_points(config, plan.total_steps)
    directions = null_space_seconds(config)
    return RunTime(
        STARTUP_S + directions, steps, evaluations * per_evaluation, saves * SAVE_S, evaluations, saves, directions
    )


def null_space_seconds(config: CommonConfig) -> float:
    """What a run with lora_a=null_space computes before its first step and the model cache does not hold yet: the
    ordinary chats' covariances, the task's and the directions solved from them for the run's rank
    (training/lora_a.py)."""
    from cookbook_engine.rl.suggested import train_mlp_used
    from cookbook_engine.training import lora_a

    keep, task, directions = lora_a.null_space_missing(config)
    solve = NULL_SPACE_SOLVE_S["mlp" if train_mlp_used(config) else "attention"]
    return NULL_SPACE_FIRST_S * keep + NULL_SPACE_TASK_S * task + solve * directions


def anchor_seconds(config: CommonConfig, rate: speed.Speeds, total_steps: int) -> float:
    """What an anchor adds to the steps: `anchor.rows` chats trained every step, and each chat the run uses scored
    once by the base model the first time (a sampling prefill and a top-K pass: two forwards without gradients).
    0 without an anchor, or with one the check refuses (the check names it; the estimate leaves it out)."""
    from cookbook_engine import renderers
    from cookbook_engine.data.loading import DatasetError
    from cookbook_engine.training import anchor

    try:
        chats = anchor.conversations(config)
    except DatasetError:
        return 0.0
    if not chats:
        return 0.0
    renderer = renderers.get_renderer(config.renderer, models.load_tokenizer(config.model))
    tokens = [len(renderer.build_supervised_example(chat, "last_assistant_message")[0]) for chat in chats]
    rows = min(config.anchor.rows, len(chats))  # type: ignore[attr-defined]
    used = min(len(chats), rows * total_steps)
    return (
        2 * statistics.mean(tokens) * used / rate.eval_tok_s
        + total_steps * rows * statistics.mean(tokens) / rate.train_tok_s
    )


def step_seconds(config: CommonConfig, prepared: object, plan: LoopPlan, rate: speed.Speeds) -> float:
    if isinstance(config, DistillConfig) and config.mode == "prompt":
        # the teacher's replies sampled once (every prompt's group, counted at max_tokens), then SL steps over them
        replies = len(getattr(prepared, "prompts", [])) * config.group_size
        return replies * config.max_tokens / rate.sample_tok_s + plan.tokens / rate.train_tok_s
    if isinstance(config, RLConfig | DistillConfig):
        # every reply counted at max_tokens, sampled and then trained on: measured on the arithmetic defaults this
        # was within 10% of the steps' time (362 s estimated, 329 s measured), since the replies' shorter length
        # and the groups dropped make up for the prompt tokens trained alongside (benchmarks/estimate_vs_actual.py)
        seconds = plan.tokens / rate.sample_tok_s + plan.tokens / rate.train_tok_s
        if config.kind == "distill":  # the teacher scores every reply
            seconds += plan.tokens / rate.eval_tok_s
        return seconds
    seconds = plan.tokens / rate.train_tok_s
    if config.kind == "dpo":  # the reference model scores every pair (a forward pass without gradients)
        seconds += plan.tokens / rate.eval_tok_s
    return seconds


def held_out_seconds(config: CommonConfig, prepared: object, rate: speed.Speeds) -> float:
    """One evaluation of the run's own held-out data: RL samples one reply per held-out problem, SL and DPO score
    their held-out split."""
    if isinstance(config, RLConfig):
        env = getattr(prepared, "env", None)
        problems = len(getattr(env, "test", None) or [])
        return problems * config.max_tokens / rate.single_sample_tok_s
    if config.kind == "distill":
        return 0.0
    return datum_tokens(getattr(prepared, "test", None) or []) / rate.eval_tok_s


def named_sets_seconds(config: CommonConfig, rate: speed.Speeds) -> float:
    """One evaluation of the eval sets named in evals=: a reply per example (generation and classification sets),
    or the examples scored (NLL and preference sets)."""
    from cookbook_engine.evals import sets

    seconds = 0.0
    for name in sets.split_names(getattr(config, "evals", "")):
        try:
            eval_set = sets.load_eval_set(name)
        except Exception:  # the check reports a bad set; the estimate leaves it out
            continue
        if eval_set.kind in ("nll", "preference"):
            seconds += len(eval_set.examples) * NLL_EXAMPLE_TOKENS / rate.eval_tok_s
        else:
            seconds += len(eval_set.examples) * eval_set.max_tokens / rate.sample_tok_s
    return seconds


def datum_tokens(data: list) -> int:
    """Tokens in a list of datums, or of preference pairs (both sides)."""
    total = 0
    for item in data:
        for datum in (item.chosen, item.rejected) if hasattr(item, "chosen") else (item,):
            model_input = getattr(datum, "model_input", None)
            total += model_input.length if model_input is not None else 0
    return total


# ---------------------------------------------------------------------------------------------- learning from runs


@dataclass(frozen=True)
class Correction:
    """Finished runs like this one took `ratio` times their estimates (the median of `runs` runs)."""

    ratio: float
    runs: int
    same_shape: bool  # all of the same batch shape (else of this model, kind and dtype, any shape)

    def describe(self) -> str:
        """'from 3 earlier runs like it on this machine, which took 1.4x their estimates'."""
        s = "s" if self.runs != 1 else ""
        like = "like it" if self.same_shape else "of this kind and model"
        return f"from {self.runs} earlier run{s} {like} on this machine, which took {self.ratio:.2g}x the estimate"


def batch_shape(config: CommonConfig) -> str:
    """What decides a step's work beside the model: '8 x 4 replies of up to 48 tokens', 'batch 8 of up to 512
    tokens'."""
    if isinstance(config, RLConfig | DistillConfig):
        return f"{config.groups_per_batch} x {config.group_size} replies of up to {config.max_tokens} tokens"
    return f"batch {config.batch_size} of up to {config.max_length} tokens"


def compute_dtype(config: CommonConfig) -> str:
    """'bf16' or 'fp32': what the local backend computes the run in on this machine."""
    choice = device.choose(config.device, dtype=config.dtype if config.dtype in device.DTYPES else "auto")
    return str(choice.dtype).replace("torch.", "").replace("bfloat16", "bf16").replace("float32", "fp32")


def _similar(config: CommonConfig) -> dict:
    return {
        "host": socket.gethostname(),
        "model": models.canonical_name(config.model),
        "kind": config.kind,
        "dtype": compute_dtype(config),
    }


def correction(store, config: CommonConfig) -> Correction | None:
    """The measured/estimated ratio of the newest similar runs that finished on this machine (None before any)."""
    rows = store.step_speeds(**_similar(config))
    same = [row for row in rows if row["shape"] == batch_shape(config)]
    chosen = (same or rows)[:SIMILAR_RUNS]
    if not chosen:
        return None
    ratio = statistics.median(row["measured_step_s"] / row["estimated_step_s"] for row in chosen)
    return Correction(ratio, len(chosen), bool(same))


def record_finished(store, run: dict, config: CommonConfig, estimated: RunTime) -> None:
    """Keep a completed local run's measured seconds per step (its start to its end, loading and evaluations
    included, as the estimate counts them) beside the estimate's, for `correction`."""
    steps = run.get("total_steps") or run.get("step") or 0
    if not steps or run.get("started_at") is None or run.get("finished_at") is None:
        return
    measured = (run["finished_at"] - run["started_at"]).total_seconds()
    if measured <= 0 or estimated.total <= 0:
        return
    store.record_step_speed(
        run["run_id"],
        **_similar(config),
        shape=batch_shape(config),
        steps=int(steps),
        measured_step_s=measured / steps,
        estimated_step_s=estimated.total / steps,
    )
