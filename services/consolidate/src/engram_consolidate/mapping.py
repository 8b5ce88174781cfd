"""Log message → Accessed event, or the reason it is poison. The subject names the tenant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from google.protobuf.message import DecodeError

from engram.events.v1 import events_pb2
from engram_consolidate.service import Accessed
from engram_platform import jetstream as jsm
from engram_platform.convert import ts_from_proto


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
