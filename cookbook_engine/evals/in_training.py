"""Eval sets during training: a run that names `evals=builtin:facts-probes,...` runs them every `eval_every` steps
and at the end, with the same evaluators as `cookbook eval`, logged as `test/<set>/<metric>` (e.g.
test/facts-probes/accuracy; file sets by their file name without extension).

`NamedEvals.for_config(config)` loads the sets once (bad names fail the run at its start, and `problems()` lets
config validation name them earlier); calling it with a training client evaluates a fresh sampler snapshot of the
current weights (`save_weights_and_get_sampling_client`), with a sampling client (RL) that client. Greedy and seeded
with the run's seed. The loops' own held-out metrics (test NLL, DPO test accuracy, RL held-out correct) stay as
they are; `PeriodicEvals` joins them with the named sets into the one evaluation a loop runs
(training/skeleton.py decides when). Not here: the loops (sl/loop.py, dpo/loop.py, rl/loop.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from cookbook_engine.data.mix import short_name as short_name  # test/<name>/...: one rule for sets and datasets
from cookbook_engine.evals import evaluators, sets
from cookbook_engine.evals.sets import problems as problems, split_names

if TYPE_CHECKING:
    from cookbook_engine.config import CommonConfig

HeldOut = Callable[[Any], Awaitable[dict[str, float]]]  # a loop's own held-out metrics on a client's weights


class NamedEvals:
    def __init__(self, eval_sets: list[sets.EvalSet], renderer: Any, seed: int):
        self.eval_sets, self.renderer, self.seed = eval_sets, renderer, seed

    @classmethod
    def for_config(cls, config: CommonConfig) -> NamedEvals:
        from cookbook_engine import renderers
        from cookbook_engine.training.common import tokenizer_for

        names = split_names(getattr(config, "evals", ""))
        if not names:
            return cls([], None, config.seed)
        renderer = renderers.get_renderer(config.renderer, tokenizer_for(config))
        return cls([sets.load_eval_set(name) for name in names], renderer, config.seed)

    def __bool__(self) -> bool:
        return bool(self.eval_sets)

    async def __call__(self, client: Any) -> dict[str, float]:
        """test/<set>/<metric> for every named set, on the client's current weights (a training or sampling client)."""
        if not self.eval_sets:
            return {}
        if hasattr(client, "save_weights_and_get_sampling_client_async"):  # a training client: snapshot it
            client = await client.save_weights_and_get_sampling_client_async()
        metrics = {}
        settings = evaluators.EvalSettings(seed=self.seed)
        for eval_set in self.eval_sets:
            result = await evaluators.evaluate(client, self.renderer, eval_set, settings)
            for metric in result.metrics:
                metrics[f"test/{short_name(eval_set.name)}/{metric.name}"] = metric.value
        return metrics


class PeriodicEvals:
    """What a loop measures every `eval_every` steps and at the end: its own held-out metrics (None when it holds no
    data out), then the named eval sets, on one client's current weights."""

    def __init__(self, held_out: HeldOut | None, named: NamedEvals):
        self.held_out, self.named = held_out, named

    def __bool__(self) -> bool:
        return self.held_out is not None or bool(self.named)

    async def __call__(self, client: Any) -> dict[str, float]:
        metrics = await self.held_out(client) if self.held_out is not None else {}
        return metrics | await self.named(client)
