"""Evaluation jobs: models x eval sets, run in the background like runs, stored in DuckDB, cancellable.

    cookbook eval models=base,RUN_ID@20 evals=builtin:facts-probes,file.jsonl max_examples=50

`parse_request` reads those key=value words; `prepare` resolves every model and loads every eval set (all input
errors surface here, before anything is written); `EvalManager.start` records the job and evaluates on a daemon
thread, one model at a time (one sampling client each, through the same model worker as training, so an evaluation
queues behind a run's steps instead of fighting it for the CPU). Each finished (model, set) pair is written at once
with its metrics and per-example rows; a pair whose result_key (model identity, set fingerprint, settings) matches a
completed earlier job is copied instead of re-run. Cancel from any process: the job is marked 'cancelling' and stops
before its next request. Not here: the evaluators themselves (evaluators.py) or SQL (storage/evals.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from cookbook_engine import models, priority, renderers
from cookbook_engine.evals import evaluators, sets, targets
from cookbook_engine.evals.evaluators import EvalCancelled, EvalResult, EvalSettings
from storage import statuses
from storage.evals import EvalStore
from storage.input_error import InputError
from storage.statuses import RunStatus

PROGRESS_WRITE_EVERY_S = 2.0
CANCEL_POLL_EVERY_S = 1.0
SETTING_KEYS = ("max_examples", "max_tokens", "samples", "temperature", "seed", "concurrency")


class EvalRequestError(InputError, ValueError):
    """Bad `cookbook eval` arguments or studio choices; the message names the setting."""


@dataclass
class EvalRequest:
    models: list[str]
    eval_sets: list[str]
    settings: EvalSettings = field(default_factory=EvalSettings)
    name: str = ""


@dataclass
class PreparedEval:
    request: EvalRequest
    targets: list[targets.ModelTarget]
    sets: list[sets.EvalSet]

    @property
    def total_examples(self) -> int:
        return len(self.targets) * sum(len(s.examples) for s in self.sets)


def _split_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_request(args: list[str]) -> EvalRequest:
    """`models=a,b evals=x,y [max_examples=N max_tokens=N samples=K temperature=T seed=S name=...]`."""
    values: dict[str, str] = {}
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep:
            raise EvalRequestError(f"{arg!r}: settings are written key=value (e.g. models=base)")
        if key not in ("models", "evals", "name") + SETTING_KEYS:
            raise EvalRequestError(
                f"{key}: unknown setting for `cookbook eval`; known: models, evals, name, {', '.join(SETTING_KEYS)}"
            )
        values[key] = raw
    if not _split_list(values.get("models", "")):
        raise EvalRequestError("models: required, e.g. models=base,RUN_ID or models=base,RUN_ID@20")
    if not _split_list(values.get("evals", "")):
        raise EvalRequestError(
            f"evals: required, e.g. evals=builtin:facts-probes; built-ins: "
            f"{', '.join(sets.BUILTIN_PREFIX + n for n in sets.BUILTIN_SETS)}"
        )
    settings = EvalSettings()
    for key in SETTING_KEYS:
        if key in values:
            setattr(settings, key, _number(key, values[key], float if key == "temperature" else int))
    try:
        settings.check()
    except ValueError as exc:
        raise EvalRequestError(str(exc)) from None
    return EvalRequest(_split_list(values["models"]), _split_list(values["evals"]), settings, values.get("name", ""))


def _number(key: str, raw: str, kind: type):
    try:
        value = float(raw)
        if kind is int and not value.is_integer():
            raise ValueError
        return kind(value)
    except ValueError:
        raise EvalRequestError(f"{key}={raw!r}: expected {'an integer' if kind is int else 'a number'}") from None


def prepare(request: EvalRequest, store=None) -> PreparedEval:
    """Resolve models and load eval sets; TargetError / EvalSetError name what is wrong. Nothing is written."""
    if not request.models or not request.eval_sets:
        raise EvalRequestError("choose at least one model and one eval set")
    resolved = [targets.parse_target(spec, store) for spec in dict.fromkeys(request.models)]
    labels: dict[str, int] = {}
    for target in resolved:
        labels[target.label] = labels.get(target.label, 0) + 1
    resolved = [t if labels[t.label] == 1 else targets.ModelTarget(**{**asdict(t), "label": t.spec}) for t in resolved]
    loaded = [sets.load_eval_set(spec, request.settings.max_examples) for spec in dict.fromkeys(request.eval_sets)]
    return PreparedEval(request, resolved, loaded)


def result_key(target: targets.ModelTarget, eval_set: sets.EvalSet, settings: EvalSettings) -> str:
    """What decides a (model, set) result; live weights never match an earlier result."""
    decisive = {k: v for k, v in asdict(settings).items() if k not in ("max_examples", "concurrency")}
    identity = target.identity if not target.live else uuid.uuid4().hex
    payload = json.dumps([identity, eval_set.name, eval_set.fingerprint(), decisive], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def new_eval_id() -> str:
    return f"eval-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


# ------------------------------------------------------------------------------------------------ running


class _Job:
    """One job in flight in this process: its cancel flag and throttled progress writes."""

    def __init__(self, store: EvalStore, eval_id: str, echo: Callable[[str], None] | None):
        self.store, self.eval_id, self.echo = store, eval_id, echo
        self.cancel_event = threading.Event()
        self.done = 0
        self._written_at = self._polled_at = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        if time.monotonic() - self._written_at >= PROGRESS_WRITE_EVERY_S:
            self._written_at = time.monotonic()
            self.store.update_job(self.eval_id, done=self.done)

    def cancelled(self) -> bool:
        if not self.cancel_event.is_set() and time.monotonic() - self._polled_at >= CANCEL_POLL_EVERY_S:
            self._polled_at = time.monotonic()
            job = self.store.get_job(self.eval_id)
            if job is None or job["status"] == RunStatus.CANCELLING:
                self.cancel_event.set()
        return self.cancel_event.is_set()

    def note(self, message: str) -> None:
        if self.echo:
            self.echo(message)


async def evaluate_all(prepared: PreparedEval, job: _Job) -> None:
    """Every model on every set, model by model; each pair is stored as soon as it is done (or reused)."""
    settings = prepared.request.settings
    progress = evaluators.Progress(job.advance, job.cancelled)
    for target in prepared.targets:
        pending = []
        for eval_set in prepared.sets:
            key = result_key(target, eval_set, settings)
            source = job.store.reuse_result(job.eval_id, target.label, eval_set.name, key, target.spec)
            if source is not None:
                job.note(f"{target.label} on {eval_set.name}: reused the identical result of {source}")
                job.advance(len(eval_set.examples))
            else:
                pending.append((eval_set, key))
        if pending:
            await _evaluate_target(target, pending, settings, progress, job)


async def _evaluate_target(target, pending, settings, progress, job: _Job) -> None:
    from cookbook_engine.chat import open_weights

    client = evaluators.resolved_client(open_weights(target.chat_target()).client)
    renderer = renderers.get_renderer(target.renderer, models.load_tokenizer(target.base_model))
    reference = None
    for eval_set, key in pending:
        if eval_set.kind == "preference" and reference is None and target.sampler_path is not None:
            reference = evaluators.resolved_client(
                open_weights(targets.parse_target(f"base:{target.base_model}").chat_target()).client
            )
        result = await evaluators.evaluate(
            client, renderer, eval_set, settings, progress, reference if eval_set.kind == "preference" else None
        )
        save(job.store, job.eval_id, target, key, result)
        summary = ", ".join(m.as_text() for m in result.metrics[:2])
        job.note(
            f"{target.label} on {eval_set.name}: {summary} ({len(result.examples) / result.seconds:.2f} examples/s)"
        )


def save(store: EvalStore, eval_id: str, target: targets.ModelTarget, key: str, result: EvalResult) -> None:
    store.save_result(
        eval_id,
        target.label,
        result.eval_set,
        kind=result.kind,
        result_key=key,
        model_spec=target.spec,
        model_path=target.sampler_path,
        run_id=target.run_id,
        step=target.step,
        seconds=result.seconds,
        metrics=[asdict(m) for m in result.metrics],
        examples=[asdict(e) for e in result.examples],
    )


class EvalManager:
    """Starts evaluation jobs on daemon threads of this process (the studio and the CLI each have one)."""

    def __init__(self, store: EvalStore | None = None):
        self.store = store or EvalStore()
        self._threads: dict[str, threading.Thread] = {}
        self._jobs: dict[str, _Job] = {}

    def start(
        self, prepared: PreparedEval, *, echo: Callable[[str], None] | None = None, sweep_id: str | None = None
    ) -> str:
        eval_id = new_eval_id()
        request = prepared.request
        self.store.create_job(
            eval_id,
            name=request.name or eval_id,
            models=[t.spec for t in prepared.targets],
            eval_sets=[s.name for s in prepared.sets],
            settings=asdict(request.settings),
            total=prepared.total_examples,
            sweep_id=sweep_id,
        )
        job = _Job(self.store, eval_id, echo)
        thread = threading.Thread(target=self._execute, args=(prepared, job), name=f"eval:{eval_id}", daemon=True)
        self._threads[eval_id], self._jobs[eval_id] = thread, job
        priority.start(thread)
        return eval_id

    def _execute(self, prepared: PreparedEval, job: _Job) -> None:
        store = self.store
        try:
            store.update_job(job.eval_id, status=RunStatus.RUNNING, started_at=datetime.now(UTC).replace(tzinfo=None))
            asyncio.run(evaluate_all(prepared, job))
            store.update_job(job.eval_id, status=RunStatus.COMPLETED, done=job.done)
        except EvalCancelled:
            store.update_job(job.eval_id, status=RunStatus.CANCELLED, done=job.done)
        except BaseException as exc:  # a failing evaluation must never take the process down with it
            store.update_job(job.eval_id, status=RunStatus.FAILED, done=job.done, error=f"{type(exc).__name__}: {exc}")
            job.note(f"evaluation failed: {type(exc).__name__}: {exc}")

    def cancel(self, eval_id: str) -> None:
        job = self._jobs.get(eval_id)
        if job is not None:
            job.cancel_event.set()
        row = self.store.get_job(eval_id)
        if row and row["status"] in statuses.STOPPABLE:
            self.store.update_job(eval_id, status=RunStatus.CANCELLING)

    def wait(self, eval_id: str, timeout: float | None = None) -> dict | None:
        """The job's row once its thread in this process ends (or the timeout passes); None for an unknown job."""
        thread = self._threads.get(eval_id)
        if thread is not None:
            thread.join(timeout)
        return self.store.get_job(eval_id)

    def examples_done(self, eval_id: str) -> int | None:
        """Examples finished so far by a job running in this process (None for jobs elsewhere: read storage)."""
        job = self._jobs.get(eval_id)
        return None if job is None else job.done

    def is_alive(self, eval_id: str) -> bool:
        thread = self._threads.get(eval_id)
        return thread is not None and thread.is_alive()


_manager: EvalManager | None = None
_manager_lock = threading.Lock()


def get_eval_manager() -> EvalManager:
    """The process-wide EvalManager, for the studio's home folder of the moment."""
    global _manager
    from storage import Store

    with _manager_lock:
        if _manager is None or _manager.store.store.path != Store.default().path:
            _manager = EvalManager(EvalStore(Store.default()))
        return _manager
