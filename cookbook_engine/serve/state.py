"""What `cookbook serve` keeps between HTTP requests: sessions, their training and sampling clients, the futures of
queued work, and the studio run each session is recorded as.

Work is done by the local backend's clients (backends/local.py), so every request lands on the one model worker of
its base model and runs there in FIFO order with everything else on this machine (several SDK clients, the studio's
own runs). A request that does work returns a future id at once; `Futures` keeps the concurrent future until the
SDK's poll (`retrieve_future`) takes its result. A session becomes a studio run (kind sl, or rl once a
policy-gradient loss is used) when it creates its first training or sampling client: loss and grad_norm per optimizer
step as metrics (train_mean_nll for cross_entropy), saved weights as checkpoints, samples as transcripts. Recording
never fails a request: a storage error is logged and the training goes on.

Sessions end like the hosted service's: when the client closes them, or when nothing names them (no heartbeat, the
SDK sends one every 10 s, no request and no poll for one of its results) for `session_timeout_s` (default 60 s;
`cookbook serve --session-timeout-s`; keep it above the heartbeat period, or a client busy on its own side between
requests for longer than it loses its session). A session whose heartbeats stop
ends **completed** when none of its work is still queued (the client process finished and exited without closing,
as tinker-cookbook's train_dpo and train_on_policy do) and **interrupted** when some is (its queued work is
cancelled). An ended session frees what it held: its training clients' adapters, its sampling clients' weight
snapshots, its sampling records and its unfetched results; only its id is kept, so that a late request is told the
session ended (heartbeat answers 410, which stops the SDK's heartbeat loop).

Not here: HTTP routing and the wire format (app.py, wire.py).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinker import types

from cookbook_engine import paths
from cookbook_engine.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from storage.statuses import RunStatus, SessionEnd, run_status_after

if TYPE_CHECKING:
    from storage import Store

log = logging.getLogger(__name__)
SESSION_TIMEOUT_S = 60.0  # six missed heartbeats
RL_LOSSES = {"importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce"}


@dataclass
class Session:
    session_id: str
    service: LocalServiceClient
    display_name: str | None
    user_metadata: dict
    models: dict[str, LocalTrainingClient] = field(default_factory=dict)
    run_id: str | None = None
    step: int = 0  # optimizer steps so far: the run's step
    loss_by_step: dict[str, float] = field(default_factory=dict)  # this step's forward_backward metrics
    samples_this_step: int = 0
    last_seen: float = field(default_factory=time.monotonic)  # the last heartbeat or request naming it
    loss_fns: list[str] = field(default_factory=list)  # the losses it trained with, in first-use order
    kind: str = "sl"
    last_forward: tuple | None = None
    lora_rank: int | None = None  # the tokens of its last forward (the first half of forward_backward_custom)
    request_ids: set[str] = field(default_factory=set)  # its futures not yet fetched


class SessionEnded(Exception):
    """A request named a session that has ended (closed, or expired when its heartbeats stopped)."""


class Futures:
    """Queued work by request id; a result is kept until the SDK has fetched it."""

    def __init__(self):
        self._futures: dict[str, tuple[concurrent.futures.Future, str]] = {}
        self._owners: dict[str, Session] = {}  # request id -> the session whose work it is
        self._lock = threading.Lock()

    def add(
        self,
        future: concurrent.futures.Future,
        kind: str,
        sample_sequence_ids: list[str] | None = None,
        session: Session | None = None,
    ) -> types.UntypedAPIFuture:
        request_id = f"req-{uuid.uuid4().hex}"
        with self._lock:
            self._futures[request_id] = (future, kind)
            if session is not None:
                session.request_ids.add(request_id)
                self._owners[request_id] = session
        return types.UntypedAPIFuture(request_id=request_id, sample_sequence_ids=sample_sequence_ids)

    def done(self, value: Any, kind: str) -> types.UntypedAPIFuture:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(value)
        return self.add(future, kind)

    def get(self, request_id: str) -> tuple[concurrent.futures.Future, str] | None:
        with self._lock:
            return self._futures.get(request_id)

    def owner(self, request_id: str) -> Session | None:
        with self._lock:
            return self._owners.get(request_id)

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._futures.pop(request_id, None)
            session = self._owners.pop(request_id, None)
            if session is not None:
                session.request_ids.discard(request_id)

    def pending(self, request_ids: set[str] | None = None) -> int:
        with self._lock:
            return sum(
                1
                for request_id, (future, _) in self._futures.items()
                if not future.done() and (request_ids is None or request_id in request_ids)
            )

    def drop(self, request_ids: set[str]) -> None:
        """Cancel what has not started and forget all of them (an ended session's)."""
        with self._lock:
            for request_id in request_ids:
                self._owners.pop(request_id, None)
                entry = self._futures.pop(request_id, None)
                if entry is not None:
                    entry[0].cancel()

    def __len__(self) -> int:
        with self._lock:
            return len(self._futures)


class ServerState:
    """Sessions, models (training clients by model_id), sampling sessions and futures of one running server."""

    def __init__(
        self,
        record: bool = True,
        session_timeout_s: float = SESSION_TIMEOUT_S,
        device: str = "auto",
        dtype: str = "auto",
    ):
        self.device, self.dtype = device, dtype  # where and in which precision every session's models compute
        self.sessions: dict[str, Session] = {}
        self.ended: dict[str, str] = {}  # session id -> how it ended (its memory is freed; the id answers 410)
        self.session_timeout_s = session_timeout_s
        self.models: dict[str, tuple[Session, LocalTrainingClient]] = {}
        self.samplers: dict[str, tuple[Session, LocalSamplingClient]] = {}
        self.futures = Futures()
        self.record = record
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="serve-session-reaper", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        while not self._stop.wait(min(1.0, max(0.05, self.session_timeout_s / 4))):
            try:
                self.expire_idle()
            except Exception:
                log.exception("expiring idle sessions failed")

    def stop(self) -> None:
        self._stop.set()

    # --- sessions -------------------------------------------------------------------------------------------
    def new_session(self, display_name: str | None, user_metadata: dict | None) -> Session:
        service = LocalServiceClient(
            user_metadata=user_metadata, display_name=display_name, device=self.device, dtype=self.dtype
        )
        session = Session(service.session_id, service, display_name, dict(user_metadata or {}))
        with self._lock:
            self.sessions[session.session_id] = session
        return session

    def _ended_error(self, what: str, session_id: str) -> SessionEnded:
        return SessionEnded(f"{what}: its session {session_id} has ended ({self.ended[session_id]})")

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            if session_id in self.ended:
                raise self._ended_error(f"session {session_id!r}", session_id)
            raise KeyError(f"session {session_id!r} is unknown to this server (was it restarted?)")
        session.last_seen = time.monotonic()
        return session

    def model(self, model_id: str) -> tuple[Session, LocalTrainingClient]:
        if model_id not in self.models:
            if model_id.split(":", 1)[0] in self.ended:
                raise self._ended_error(f"model {model_id!r}", model_id.split(":", 1)[0])
            raise KeyError(f"model {model_id!r} is unknown to this server (was it restarted?)")
        session, client = self.models[model_id]
        session.last_seen = time.monotonic()
        return session, client

    def future(self, request_id: str) -> tuple[concurrent.futures.Future, str] | None:
        """A request's queued work; the SDK polling for it names its session as alive."""
        session = self.futures.owner(request_id)
        if session is not None:
            session.last_seen = time.monotonic()
        return self.futures.get(request_id)

    def sampler(self, sampling_session_id: str) -> tuple[Session, LocalSamplingClient]:
        if sampling_session_id not in self.samplers:
            session_id = sampling_session_id.split("-sampler-", 1)[0]
            if session_id in self.ended:
                raise self._ended_error(f"sampling session {sampling_session_id!r}", session_id)
            raise KeyError(f"sampling session {sampling_session_id!r} is unknown to this server")
        session, client = self.samplers[sampling_session_id]
        session.last_seen = time.monotonic()
        return session, client

    def add_model(
        self, session: Session, model_seq_id: int | None, client: LocalTrainingClient, parent: str | None = None
    ) -> str:
        """Register a training client under the model id the SDK derives itself: "<session_id>:train:<seq>"
        (its checkpoints are named by the local client's own model_id, a valid tinker:// run id)."""
        model_id = f"{session.session_id}:train:{model_seq_id if model_seq_id is not None else next(self._ids)}"
        with self._lock:
            if session.session_id not in self.sessions:  # it ended while the client was being made
                client.close()
                raise SessionEnded(f"session {session.session_id} has ended ({self.ended.get(session.session_id)})")
            session.models[model_id] = client
            self.models[model_id] = (session, client)
        base_model = client.get_info().model_data.model_name
        assert base_model is not None  # the local client always names its base model
        self.start_run(session, base_model, lora_rank=client.rank)
        if parent:
            self._record_parent(session, parent)
        return model_id

    def add_sampler(self, session: Session, client: LocalSamplingClient) -> str:
        sampling_session_id = f"{session.session_id}-sampler-{next(self._ids)}"
        with self._lock:
            self.samplers[sampling_session_id] = (session, client)
        self.start_run(session, client.get_base_model())
        return sampling_session_id

    def finish(self, session_id: str, status: str, note: str | None = None) -> None:
        """End a session: record its run's end, then free everything it held (adapters, sampler snapshots,
        sampling records, unfetched results)."""
        with self._lock:
            session = self.sessions.pop(session_id, None)
            if session is None:
                return
            self.ended[session_id] = note or f"closed: {status}"
            for model_id in session.models:
                self.models.pop(model_id, None)
            for sampler_id in [k for k, (owner, _) in self.samplers.items() if owner is session]:
                del self.samplers[sampler_id]
        self.futures.drop(session.request_ids)
        session.service.close(status)
        session.models.clear()
        self._write(session, "update_run", session.run_id, status=run_status_after(status))

    def expire_idle(self, now: float | None = None) -> list[str]:
        """End the sessions nothing has named for session_timeout_s: completed if none of their work is queued,
        interrupted (their queued work cancelled) if some is. Returns their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [s for s in self.sessions.values() if now - s.last_seen > self.session_timeout_s]
        for session in idle:
            busy = self.futures.pending(session.request_ids) > 0
            status = SessionEnd.INTERRUPTED if busy else SessionEnd.SUCCESS
            note = f"expired: no heartbeat for {self.session_timeout_s:g} s" + (" with work queued" if busy else "")
            log.info("session %s %s; its run ends %s", session.session_id, note, run_status_after(status))
            self.finish(session.session_id, status, note)
        return [s.session_id for s in idle]

    def finish_all(self) -> None:
        for session_id in list(self.sessions):
            self.finish(session_id, SessionEnd.INTERRUPTED)
        self.stop()

    # --- recording the session as a studio run ------------------------------------------------------------
    def _storage(self) -> Store:
        if self._store is None:
            from storage import Store

            self._store = Store.default()
        return self._store

    def _write(self, session: Session, method: str, *args, **kwargs) -> None:
        if not self.record or session.run_id is None:
            return
        try:
            getattr(self._storage(), method)(*args, **kwargs)
        except Exception as exc:  # a storage error never fails the client's request
            log.warning(
                "recording session %s as run %s: %s failed: %s", session.session_id, session.run_id, method, exc
            )

    @staticmethod
    def _run_config(session: Session) -> dict:
        return {
            "source": "cookbook serve",
            "session_id": session.session_id,
            "lora_rank": session.lora_rank,
            "user_metadata": session.user_metadata,
            "loss_fns": list(session.loss_fns),
        }

    def start_run(self, session: Session, base_model: str, lora_rank: int | None = None) -> None:
        if not self.record or session.run_id is not None:
            return
        from cookbook_engine.runs import new_run_id

        session.run_id = new_run_id("sl")
        name = session.display_name or f"tinker session {session.session_id[-6:]}"
        session.lora_rank = lora_rank
        config = self._run_config(session)
        try:
            store = self._storage()
            store.create_run(
                session.run_id,
                name=name,
                kind="sl",
                backend="local",
                base_model=base_model,
                config=config,
                log_dir=paths.run_dir(session.run_id),
                status=RunStatus.QUEUED,
            )
            store.claim_run(session.run_id)
        except Exception as exc:
            log.warning("session %s: could not create its studio run: %s", session.session_id, exc)
            session.run_id = None

    def _record_parent(self, session: Session, path: str) -> None:
        """The checkpoint a session's training client started from, and the run that saved it (matched by its
        tinker:// path or its folder)."""
        if not self.record or session.run_id is None:
            return
        from cookbook_engine.backends import compat

        names = {path, str(compat.resolve(path))}
        try:
            rows = self._storage().list_checkpoints()
        except Exception as exc:
            log.warning("session %s: could not look up its parent checkpoint: %s", session.session_id, exc)
            rows = []
        parents = [r["run_id"] for r in rows if names & {r.get("state_path"), r.get("sampler_path")}]
        self._write(
            session, "update_run", session.run_id, parent_checkpoint=path, parent_run_id=parents[0] if parents else None
        )

    def on_forward(self, session: Session, data: list[types.Datum]) -> None:
        session.last_forward = _tokens_of(data)

    def _loss_name(self, session: Session, loss_fn: str, data: list[types.Datum]) -> str:
        """The loss the client trained with. forward_backward_custom arrives as a forward and then a cross_entropy
        forward_backward on the same tokens whose weights are the custom loss's negated gradient; interleaved pairs
        with weights >= 0 on the first and <= 0 on the second of each pair are DPO's (tinker-cookbook's train_dpo)."""
        if loss_fn != "cross_entropy" or session.last_forward != _tokens_of(data):
            return loss_fn
        sums = [float(d.loss_fn_inputs["weights"].to_numpy().sum()) for d in data]
        pairs = len(sums) % 2 == 0 and all(a >= 0 >= b for a, b in zip(sums[::2], sums[1::2]))
        return "custom:dpo" if pairs and any(v < 0 for v in sums) else "custom"

    def _note_loss(self, session: Session, loss: str) -> None:
        if loss in session.loss_fns:
            return
        session.loss_fns.append(loss)
        kind = "rl" if loss in RL_LOSSES else "dpo" if loss == "custom:dpo" else session.kind
        changes: dict[str, Any] = {"config": {**self._run_config(session), "loss_fns": list(session.loss_fns)}}
        if kind != session.kind:
            session.kind = changes["kind"] = kind
        self._write(session, "update_run", session.run_id, **changes)

    def on_forward_backward(
        self, session: Session, loss_fn: str, data: list[types.Datum], output: types.ForwardBackwardOutput
    ) -> None:
        loss = self._loss_name(session, loss_fn, data)
        session.last_forward = None
        self._note_loss(session, loss)
        for key, value in output.metrics.items():
            session.loss_by_step[key] = session.loss_by_step.get(key, 0.0) + float(value)
        if loss == "cross_entropy":  # a mean NLL only for plain cross-entropy (weights >= 0)
            weight = sum(float(d.loss_fn_inputs["weights"].to_numpy().sum()) for d in data)
            session.loss_by_step["_weight"] = session.loss_by_step.get("_weight", 0.0) + weight
        if loss in RL_LOSSES:  # the sampler-vs-trainer gap on trained tokens, as tinker-cookbook names it
            gap, count = _sample_train_gap(data, output)
            session.loss_by_step["_kl_sum"] = session.loss_by_step.get("_kl_sum", 0.0) + gap
            session.loss_by_step["_kl_count"] = session.loss_by_step.get("_kl_count", 0.0) + count

    def on_optim_step(self, session: Session, response: types.OptimStepResponse) -> None:
        step = session.loss_by_step
        metrics = {k: v for k, v in step.items() if not k.startswith("_")}
        if step.get("_weight"):
            metrics["train_mean_nll"] = metrics.get("loss:sum", 0.0) / step["_weight"]
        if step.get("_kl_count"):
            metrics["optim/kl_sample_train_v1"] = step["_kl_sum"] / step["_kl_count"]
        metrics.update(response.metrics or {})
        self._write(session, "log_metrics", session.run_id, session.step, metrics)
        self._write(session, "update_run", session.run_id, step=session.step)
        session.step += 1
        session.loss_by_step = {}
        session.samples_this_step = 0

    def on_checkpoint(self, session: Session, name: str, kind: str, path: str) -> None:
        paths_by_kind = {"state_path": path} if kind == "state" else {"sampler_path": path}
        self._write(
            session,
            "add_checkpoint",
            session.run_id,
            step=session.step,
            name=f"{kind}:{name}",
            kind=kind,
            **paths_by_kind,
        )

    def on_sample(self, session: Session, tokenizer, prompt: types.ModelInput, response: types.SampleResponse) -> None:
        if not self.record or session.run_id is None:
            return
        prompt_text = tokenizer.decode(prompt.to_ints())
        group = session.samples_this_step
        session.samples_this_step += 1
        rows = [
            {
                "step": session.step,
                "group_idx": group,
                "sample_idx": i,
                "prompt": prompt_text,
                "completion": tokenizer.decode(seq.tokens),
                "stop_reason": seq.stop_reason,
            }
            for i, seq in enumerate(response.sequences)
        ]
        self._write(session, "add_transcripts", session.run_id, rows)


def _tokens_of(data: list[types.Datum]) -> tuple:
    return tuple(tuple(d.model_input.to_ints()) for d in data)


def _sample_train_gap(data: list[types.Datum], output: types.ForwardBackwardOutput) -> tuple[float, int]:
    """Sum and count over trained tokens (advantage != 0) of sampler log-prob minus trainer log-prob."""
    total, count = 0.0, 0
    for datum, out in zip(data, output.loss_fn_outputs):
        if "logprobs" not in datum.loss_fn_inputs or "advantages" not in datum.loss_fn_inputs:
            continue
        sampler = datum.loss_fn_inputs["logprobs"].to_numpy()
        trainer = out["logprobs"].to_numpy()
        trained = datum.loss_fn_inputs["advantages"].to_numpy() != 0
        total += float((sampler[trained] - trainer[trained]).sum())
        count += int(trained.sum())
    return total, count
