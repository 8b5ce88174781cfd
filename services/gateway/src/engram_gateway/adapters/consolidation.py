"""ConsolidationControl on NATS: requests are ``ConsolidateRequested`` events on
``engram.<tenant>.consolidate.v1`` (stream ENGRAM_CONSOLIDATE); status is read from the
consolidate worker's KV bucket ENGRAM_CONSOLIDATE (``run.<tenant>.<pass>``,
``dry.<tenant>.<pass>``). The worker creates both, so until one has started a request
is refused as UNAVAILABLE and every status reads "never ran"."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoStreamResponseError
from nats.js.kv import KeyValue

from engram.events.v1 import events_pb2
from engram_core.errors import Unavailable
from engram_gateway.service import metrics
from engram_gateway.service.admin import PASSES, Change, PassRun, PassStatus, RunState
from engram_gateway.service.metrics import published
from engram_platform import jetstream
from engram_platform.convert import ts_from_proto, ts_to_proto
from engram_platform.telemetry import inject_context

_STATES = {
    events_pb2.RUN_STATE_RUNNING: RunState.RUNNING,
    events_pb2.RUN_STATE_SUCCEEDED: RunState.SUCCEEDED,
    events_pb2.RUN_STATE_FAILED: RunState.FAILED,
}


def _run(pass_name: str, msg: events_pb2.ConsolidationRun) -> PassRun | None:
    state = _STATES.get(msg.state)
    if state is None or not msg.run_id:
        return None
    started = ts_from_proto(msg.started_at) if msg.HasField("started_at") else None
    finished = ts_from_proto(msg.finished_at) if msg.HasField("finished_at") else None
    took = (finished - started).total_seconds() if started and finished else 0.0
    return PassRun(
        pass_name=pass_name,
        run_id=msg.run_id,
        state=state,
        dry_run=msg.dry_run,
        trigger=msg.trigger,
        started_at=started,
        finished_at=finished,
        duration_s=max(0.0, took),
        phase=msg.phase,
        done=msg.done,
        total=msg.total,
        changes=tuple(Change(c.kind, c.count, tuple(c.sample)) for c in msg.changes),
        error=msg.error,
        resumes=msg.resumes,
        params=msg.params,
        unchanged_checked_at=ts_from_proto(msg.checked_at) if msg.HasField("checked_at") else None,
    )


class NatsConsolidation:
    def __init__(self, js: JetStreamContext, timeout_s: float) -> None:
        self._js = js
        self._timeout = timeout_s
        self._kv: KeyValue | None = None

    async def request(
        self,
        tenant: str,
        run_id: str,
        passes: Sequence[str],
        dry_run: bool,
        at: datetime,
        params: str = "",
    ) -> None:
        trace = inject_context()
        msg = events_pb2.ConsolidateRequested(
            envelope=events_pb2.Envelope(
                event_id=run_id, tenant=tenant, occurred_at=ts_to_proto(at), trace_context=trace
            ),
            passes=list(passes),
            dry_run=dry_run,
            params=params,
        )
        event = jetstream.CONSOLIDATE_EVENT
        subject = jetstream.subject(tenant, event)
        headers = {"Nats-Msg-Id": run_id, jetstream.EVENT_HEADER: event, **trace}
        try:
            ack = await self._js.publish(
                subject, msg.SerializeToString(), timeout=self._timeout, headers=headers
            )
        except (NoRespondersError, NoStreamResponseError) as exc:
            published(event, metrics.UNAVAILABLE)
            raise Unavailable(
                "no consolidate worker has started yet (no stream takes consolidation requests)"
            ) from exc
        except Exception as exc:
            published(event, metrics.failure_reason(exc))
            raise Unavailable(f"log publish to {subject} failed: {exc!r}") from exc
        published(event, "duplicate" if ack.duplicate else "ok")

    async def _bucket(self) -> KeyValue | None:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(jetstream.CONSOLIDATE_BUCKET)
            except BucketNotFoundError:
                return None
        return self._kv

    async def _get(self, kv: KeyValue, key: str) -> events_pb2.ConsolidationRun | None:
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
        return events_pb2.ConsolidationRun.FromString(entry.value or b"")

    async def status(self, tenant: str, passes: Sequence[str] = PASSES) -> list[PassStatus]:
        try:
            kv = await self._bucket()
            if kv is None:
                return [PassStatus(p) for p in passes]
            records = await asyncio.gather(
                *(self._get(kv, f"{kind}.{tenant}.{p}") for p in passes for kind in ("run", "dry"))
            )
        except Exception as exc:
            raise Unavailable(f"cannot read consolidation status: {exc!r}") from exc
        out = []
        for i, p in enumerate(passes):
            run, dry = records[2 * i], records[2 * i + 1]
            out.append(
                PassStatus(
                    p,
                    last_run=_run(p, run) if run is not None else None,
                    pending_run_id=run.pending_run_id if run is not None else "",
                    last_dry_run=_run(p, dry) if dry is not None else None,
                )
            )
        return out
