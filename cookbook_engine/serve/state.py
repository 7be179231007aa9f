"""What `cookbook serve` keeps between HTTP requests: sessions, their training and sampling clients, the futures of
queued work, and the studio run each session is recorded as.

Work is done by the local backend's clients (backends/local.py), so every request lands on the one model worker of
its base model and runs there in FIFO order with everything else on this machine (several SDK clients, the studio's
own runs). A request that does work returns a future id at once; `Futures` keeps the concurrent future until the
SDK's poll (`retrieve_future`) takes its result. A session becomes a studio run (kind sl, or rl once a
policy-gradient loss is used) when it creates its first training or sampling client: loss and grad_norm per optimizer
step as metrics (train_mean_nll for cross_entropy), saved weights as checkpoints, samples as transcripts. Recording
never fails a request: a storage error is logged and the training goes on.

Not here: HTTP routing and the wire format (app.py, wire.py).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
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


class Futures:
    """Queued work by request id; a result is kept until the SDK has fetched it."""

    def __init__(self):
        self._futures: dict[str, tuple[concurrent.futures.Future, str]] = {}
        self._lock = threading.Lock()

    def add(
        self, future: concurrent.futures.Future, kind: str, sample_sequence_ids: list[str] | None = None
    ) -> types.UntypedAPIFuture:
        request_id = f"req-{uuid.uuid4().hex}"
        with self._lock:
            self._futures[request_id] = (future, kind)
        return types.UntypedAPIFuture(request_id=request_id, sample_sequence_ids=sample_sequence_ids)

    def done(self, value: Any, kind: str) -> types.UntypedAPIFuture:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(value)
        return self.add(future, kind)

    def get(self, request_id: str) -> tuple[concurrent.futures.Future, str] | None:
        with self._lock:
            return self._futures.get(request_id)

    def forget(self, request_id: str) -> None:
        with self._lock:
            self._futures.pop(request_id, None)

    def pending(self) -> int:
        with self._lock:
            return sum(1 for future, _ in self._futures.values() if not future.done())


class ServerState:
    """Sessions, models (training clients by model_id), sampling sessions and futures of one running server."""

    def __init__(self, record: bool = True):
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, tuple[Session, LocalTrainingClient]] = {}
        self.samplers: dict[str, tuple[Session, LocalSamplingClient]] = {}
        self.futures = Futures()
        self.record = record
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # --- sessions -------------------------------------------------------------------------------------------
    def new_session(self, display_name: str | None, user_metadata: dict | None) -> Session:
        service = LocalServiceClient(user_metadata=user_metadata, display_name=display_name)
        session = Session(service.session_id, service, display_name, dict(user_metadata or {}))
        with self._lock:
            self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            raise KeyError(f"session {session_id!r} is unknown to this server (was it restarted?)")
        return self.sessions[session_id]

    def model(self, model_id: str) -> tuple[Session, LocalTrainingClient]:
        if model_id not in self.models:
            raise KeyError(f"model {model_id!r} is unknown to this server (was it restarted?)")
        return self.models[model_id]

    def sampler(self, sampling_session_id: str) -> tuple[Session, LocalSamplingClient]:
        if sampling_session_id not in self.samplers:
            raise KeyError(f"sampling session {sampling_session_id!r} is unknown to this server")
        return self.samplers[sampling_session_id]

    def add_model(self, session: Session, model_seq_id: int | None, client: LocalTrainingClient) -> str:
        """Register a training client under the model id the SDK derives itself: "<session_id>:train:<seq>"
        (its checkpoints are named by the local client's own model_id, a valid tinker:// run id)."""
        model_id = f"{session.session_id}:train:{model_seq_id if model_seq_id is not None else next(self._ids)}"
        with self._lock:
            session.models[model_id] = client
            self.models[model_id] = (session, client)
        base_model = client.get_info().model_data.model_name
        assert base_model is not None  # the local client always names its base model
        self.start_run(session, base_model, lora_rank=client.rank)
        return model_id

    def add_sampler(self, session: Session, client: LocalSamplingClient) -> str:
        sampling_session_id = f"{session.session_id}-sampler-{next(self._ids)}"
        with self._lock:
            self.samplers[sampling_session_id] = (session, client)
        self.start_run(session, client.get_base_model())
        return sampling_session_id

    def finish(self, session_id: str, status: str) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            return
        session.service.close(status)
        self._write(session, "update_run", session.run_id, status=run_status_after(status))

    def finish_all(self) -> None:
        for session_id in list(self.sessions):
            if not self.sessions[session_id].service.closed:
                self.finish(session_id, SessionEnd.INTERRUPTED)

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

    def start_run(self, session: Session, base_model: str, lora_rank: int | None = None) -> None:
        if not self.record or session.run_id is not None:
            return
        from cookbook_engine.runs import new_run_id

        session.run_id = new_run_id("sl")
        name = session.display_name or f"tinker session {session.session_id[-6:]}"
        config = {
            "source": "cookbook serve",
            "session_id": session.session_id,
            "lora_rank": lora_rank,
            "user_metadata": session.user_metadata,
        }
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

    def on_forward_backward(
        self, session: Session, loss_fn: str, data: list[types.Datum], output: types.ForwardBackwardOutput
    ) -> None:
        if loss_fn in RL_LOSSES and not session.loss_by_step.get("_rl"):
            session.loss_by_step["_rl"] = 1.0
            self._write(session, "update_run", session.run_id, kind="rl")
        for key, value in output.metrics.items():
            session.loss_by_step[key] = session.loss_by_step.get(key, 0.0) + float(value)
        if loss_fn == "cross_entropy":
            weight = sum(float(d.loss_fn_inputs["weights"].to_numpy().sum()) for d in data)
            session.loss_by_step["_weight"] = session.loss_by_step.get("_weight", 0.0) + weight

    def on_optim_step(self, session: Session, response: types.OptimStepResponse) -> None:
        metrics = {k: v for k, v in session.loss_by_step.items() if not k.startswith("_")}
        if session.loss_by_step.get("_weight"):
            metrics["train_mean_nll"] = metrics.get("loss:sum", 0.0) / session.loss_by_step["_weight"]
        metrics.update(response.metrics or {})
        self._write(session, "log_metrics", session.run_id, session.step, metrics)
        self._write(session, "update_run", session.run_id, step=session.step)
        session.step += 1
        session.loss_by_step = {"_rl": 1.0} if session.loss_by_step.get("_rl") else {}
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
