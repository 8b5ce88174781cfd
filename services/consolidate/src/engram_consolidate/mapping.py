"""Log message → Accessed event or consolidation Request, or the reason it is poison (the
subject names the tenant); run records ↔ the bytes of the KV bucket."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from google.protobuf.message import DecodeError

from engram.events.v1 import events_pb2
from engram_consolidate.service import (
    GLOBAL,
    Accessed,
    Change,
    Key,
    PassName,
    Request,
    RunRecord,
    RunState,
    Trigger,
    pass_names,
)
from engram_platform import jetstream as jsm
from engram_platform.convert import ts_from_proto, ts_to_proto

CONSOLIDATE_EVENT = jsm.CONSOLIDATE_EVENT  # engram.<tenant>.consolidate.v1


@dataclass(frozen=True, slots=True)
class Decoded:
    tenant: str  # from the subject; "" when it is not an engram event subject
    event: Accessed | None = None
    problem: str = ""  # why the message is poison; set exactly when event is None


def tenant_of(subject: str) -> str:
    parts = subject.split(".")
    ok = len(parts) == 4 and parts[0] == "engram" and parts[3] == "v1"
    return parts[1] if ok and jsm.TENANT_RE.match(parts[1]) else ""


def decode(subject: str, data: bytes, sequence: int, logged_at: datetime) -> Decoded:
    """``logged_at`` (when the log took the message) stands in for a missing access time."""
    tenant = tenant_of(subject)
    if not tenant or jsm.event_of(subject) != jsm.MEMORY_ACCESSED:
        return Decoded(tenant, problem=f"not a memory_accessed subject: {subject!r}")
    try:
        msg = events_pb2.MemoryAccessed.FromString(data)
        if msg.envelope.tenant and msg.envelope.tenant != tenant:
            problem = f"envelope of tenant {msg.envelope.tenant!r} on {tenant!r}"
            return Decoded(tenant, problem=problem)
        if msg.HasField("accessed_at"):
            at = ts_from_proto(msg.accessed_at)
        elif msg.envelope.HasField("occurred_at"):
            at = ts_from_proto(msg.envelope.occurred_at)
        else:
            at = logged_at
    except (DecodeError, ValueError, OverflowError) as exc:
        return Decoded(tenant, problem=f"undecodable memory_accessed: {exc}")
    return Decoded(tenant, event=Accessed(tenant, tuple(msg.ids), at, sequence))


# --- consolidation requests and run records ---------------------------------------------


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    tenant: str
    event: Request | None = None
    problem: str = ""  # set exactly when event is None


def decode_request(subject: str, data: bytes, logged_at: datetime) -> DecodedRequest:
    """A ConsolidateRequested event; its envelope's id is the run id."""
    tenant = tenant_of(subject)
    if not tenant or jsm.event_of(subject) != CONSOLIDATE_EVENT:
        return DecodedRequest(tenant, problem=f"not a consolidate subject: {subject!r}")
    try:
        msg = events_pb2.ConsolidateRequested.FromString(data)
        env = msg.envelope
        if env.tenant and env.tenant != tenant:
            return DecodedRequest(
                tenant, problem=f"envelope of tenant {env.tenant!r} on {tenant!r}"
            )
        if not env.event_id:
            return DecodedRequest(tenant, problem="consolidate request without an event id")
        passes = pass_names(msg.passes)
        at = ts_from_proto(env.occurred_at) if env.HasField("occurred_at") else logged_at
    except (DecodeError, ValueError, OverflowError) as exc:
        return DecodedRequest(tenant, problem=f"undecodable consolidate request: {exc}")
    if not passes:
        return DecodedRequest(tenant, problem="consolidate request names no pass")
    request = Request(tenant, env.event_id, passes, msg.dry_run, at, msg.params)
    return DecodedRequest(tenant, request)


def key_name(key: Key) -> str:
    """The KV key of a record: ``run.<tenant>.<pass>`` or ``dry.<tenant>.<pass>``."""
    return f"{'dry' if key.dry_run else 'run'}.{key.tenant}.{key.pass_name.value}"


def key_from_name(name: str) -> Key | None:
    parts = name.split(".")
    if len(parts) != 3 or parts[0] not in ("run", "dry"):
        return None
    if parts[1] != GLOBAL and not jsm.TENANT_RE.match(parts[1]):
        return None
    try:
        return Key(parts[1], PassName(parts[2]), parts[0] == "dry")
    except ValueError:
        return None


_STATES = {
    RunState.NEVER: events_pb2.RUN_STATE_UNSPECIFIED,
    RunState.RUNNING: events_pb2.RUN_STATE_RUNNING,
    RunState.SUCCEEDED: events_pb2.RUN_STATE_SUCCEEDED,
    RunState.FAILED: events_pb2.RUN_STATE_FAILED,
}
_STATES_BACK = {v: k for k, v in _STATES.items()}


_TimeField = Literal[
    "now", "started_at", "finished_at", "heartbeat_at", "requested_at", "checked_at", "full_at"
]
_TIME_FIELDS: tuple[_TimeField, ...] = (
    "now",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "requested_at",
    "checked_at",
    "full_at",
)


def _ts(msg: events_pb2.ConsolidationRun, name: _TimeField) -> datetime | None:
    return ts_from_proto(getattr(msg, name)) if msg.HasField(name) else None


def record_to_bytes(r: RunRecord) -> bytes:
    msg = events_pb2.ConsolidationRun(
        run_id=r.run_id,
        tenant=r.key.tenant,
        state=_STATES[r.state],
        dry_run=r.key.dry_run,
        trigger=r.trigger.value,
        phase=r.phase,
        cursor=r.cursor,
        done=r.done,
        total=r.total,
        changes=[
            events_pb2.ConsolidationChange(kind=c.kind, count=c.count, sample=list(c.sample))
            for c in r.changes
        ],
        error=r.error,
        holder=r.holder,
        resumes=r.resumes,
        pending_run_id=r.pending_run_id,
        params=r.params,
        pending_params=r.pending_params,
        input_mark=r.input_mark,
    )
    setattr(msg, "pass", r.key.pass_name.value)
    for name in _TIME_FIELDS:
        value = getattr(r, name)
        if value is not None:
            getattr(msg, name).CopyFrom(ts_to_proto(value))
    return msg.SerializeToString()


def record_from_bytes(key: Key, data: bytes) -> RunRecord:
    msg = events_pb2.ConsolidationRun.FromString(data)
    return RunRecord(
        key=key,
        run_id=msg.run_id,
        state=_STATES_BACK.get(msg.state, RunState.NEVER),
        trigger=Trigger.REQUEST if msg.trigger == Trigger.REQUEST.value else Trigger.SCHEDULE,
        now=_ts(msg, "now"),
        started_at=_ts(msg, "started_at"),
        finished_at=_ts(msg, "finished_at"),
        phase=msg.phase,
        cursor=msg.cursor,
        done=msg.done,
        total=msg.total,
        changes=tuple(Change(c.kind, c.count, tuple(c.sample)) for c in msg.changes),
        error=msg.error,
        holder=msg.holder,
        heartbeat_at=_ts(msg, "heartbeat_at"),
        resumes=msg.resumes,
        pending_run_id=msg.pending_run_id,
        requested_at=_ts(msg, "requested_at"),
        params=msg.params,
        pending_params=msg.pending_params,
        input_mark=msg.input_mark,
        checked_at=_ts(msg, "checked_at"),
        full_at=_ts(msg, "full_at"),
    )
