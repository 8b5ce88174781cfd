"""DeadLetterLog and TenantLog on JetStream.

Dead letters are the workers' copies on ENGRAM_DEADLETTER, subject
``engram.<tenant>.dead_letter.v1``: the original payload with ``Engram-*`` headers
(engram_platform.pull_worker). A tenant's letters are read by subject, one direct get
per letter (next by subject from a sequence), so a page costs no consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from email.header import Header, decode_header
from typing import Any

from google.protobuf.message import DecodeError
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from engram.events.v1 import events_pb2
from engram_core.errors import NotFound, Unavailable
from engram_gateway.service.dead_letters import DeadLetter
from engram_platform import jetstream as jsm
from engram_platform.pull_worker import (
    DELIVERIES_HEADER,
    ORIGINAL_SEQUENCE_HEADER,
    ORIGINAL_STREAM_HEADER,
    ORIGINAL_SUBJECT_HEADER,
    REASON_HEADER,
    STORE_HEADER,
)

# What a letter's headers say about its refusal; the rest (the event kind, the trace)
# travels back with a replayed event.
_LETTER_HEADERS = frozenset(
    {
        REASON_HEADER,
        STORE_HEADER,
        ORIGINAL_SUBJECT_HEADER,
        ORIGINAL_STREAM_HEADER,
        ORIGINAL_SEQUENCE_HEADER,
        DELIVERIES_HEADER,
    }
)
_MEMORY_ID: dict[str, Callable[[bytes], str]] = {
    jsm.MEMORY_STORED: lambda b: events_pb2.MemoryStored.FromString(b).memory.id,
    jsm.MEMORY_UPDATED: lambda b: events_pb2.MemoryUpdated.FromString(b).memory.id,
    jsm.MEMORY_DELETED: lambda b: events_pb2.MemoryDeleted.FromString(b).id,
    jsm.RELATION_ADDED: lambda b: events_pb2.RelationAdded.FromString(b).relation.source_id,
    jsm.RELATION_REMOVED: lambda b: events_pb2.RelationRemoved.FromString(b).source_id,
}


def replay_id(sequence: int) -> str:
    """The republished event's Nats-Msg-Id: new to the log, the same for a retried replay."""
    return f"replay:{jsm.STREAM_DEADLETTER}:{sequence}"


def _headers(raw: RawStreamMsg) -> dict[str, str]:
    """The letter's headers as sent. The stream-get reply parses them with the email
    parser, which keeps a non-ASCII value (a reason may quote the input; publish sends
    UTF-8) as a Header of raw bytes."""
    return {str(k): _text(v) for k, v in (raw.headers or {}).items()}


def _text(value: object) -> str:
    if isinstance(value, Header):
        parts = decode_header(value)
        raw = b"".join(p if isinstance(p, bytes) else p.encode() for p, _ in parts)
        return raw.decode("utf-8", "replace")
    return str(value)


def _int(headers: Mapping[str, Any], key: str) -> int:
    try:
        return int(headers.get(key, 0))
    except (TypeError, ValueError):
        return 0


def _memory_id(event: str, payload: bytes) -> str:
    decode = _MEMORY_ID.get(event)
    try:
        return decode(payload) if decode is not None else ""
    except DecodeError:
        return ""


def _letter(raw: RawStreamMsg) -> DeadLetter:
    headers = _headers(raw)
    original = headers.get(ORIGINAL_SUBJECT_HEADER, "")
    event = jsm.event_of(original)
    return DeadLetter(
        sequence=int(raw.seq or 0),
        event=event,
        original_subject=original,
        original_stream=headers.get(ORIGINAL_STREAM_HEADER, ""),
        original_sequence=_int(headers, ORIGINAL_SEQUENCE_HEADER),
        reason=headers.get(REASON_HEADER, ""),
        store=headers.get(STORE_HEADER, ""),
        deliveries=_int(headers, DELIVERIES_HEADER),
        at=raw.time,
        memory_id=_memory_id(event, raw.data or b""),
    )


class JetStreamDeadLetters:
    """DeadLetterLog and TenantLog (service/stats.py) on the log."""

    def __init__(self, js: JetStreamContext, timeout_s: float) -> None:
        self._js = js
        self._timeout = timeout_s

    async def _get(self, sequence: int, subject: str = "") -> RawStreamMsg | None:
        """Letter ``sequence``, or with ``subject`` the first on it from there; None: none."""
        try:
            if subject:
                return await self._js.get_msg(
                    jsm.STREAM_DEADLETTER, seq=sequence, subject=subject, next=True
                )
            return await self._js.get_msg(jsm.STREAM_DEADLETTER, seq=sequence)
        except NotFoundError:
            return None
        except Exception as exc:
            raise Unavailable(f"cannot read {jsm.STREAM_DEADLETTER}: {exc!r}") from exc

    async def page(self, tenant: str, after: int, limit: int) -> list[DeadLetter]:
        subject = jsm.subject(tenant, jsm.DEAD_LETTER)
        out: list[DeadLetter] = []
        sequence = after + 1
        while len(out) < limit:
            raw = await self._get(sequence, subject)
            if raw is None:
                break
            out.append(_letter(raw))
            sequence = int(raw.seq or 0) + 1
        return out

    async def republish(self, tenant: str, sequence: int) -> int:
        raw = await self._get(sequence)
        if raw is None or raw.subject != jsm.subject(tenant, jsm.DEAD_LETTER):
            raise NotFound(f"no dead letter {sequence} of tenant {tenant!r}")
        headers = _headers(raw)
        original = headers.get(ORIGINAL_SUBJECT_HEADER, "")
        # The letter's subject names the tenant; its payload goes back to that tenant only.
        if original.split(".")[1:2] != [tenant]:
            raise ValueError(f"its original subject {original!r} is not the tenant's")
        kept = {
            k: v
            for k, v in headers.items()
            if k not in _LETTER_HEADERS and not k.startswith("Nats-")
        }
        new_sequence, _ = await jsm.publish(
            self._js, original, raw.data or b"", replay_id(sequence), kept, self._timeout
        )
        return new_sequence

    async def delete(self, sequence: int) -> None:
        try:
            await self._js.delete_msg(jsm.STREAM_DEADLETTER, sequence)
        except Exception as exc:
            raise Unavailable(f"cannot delete dead letter {sequence}: {exc!r}") from exc

    async def dead_letters(self, tenant: str) -> int:
        subject = jsm.subject(tenant, jsm.DEAD_LETTER)
        try:
            info = await self._js.stream_info(jsm.STREAM_DEADLETTER, subjects_filter=subject)
        except Exception as exc:
            raise Unavailable(f"cannot read {jsm.STREAM_DEADLETTER}: {exc!r}") from exc
        return int((info.state.subjects or {}).get(subject, 0))

    async def last_sequence(self, tenant: str) -> int:
        return await jsm.tenant_last_sequence(self._js, tenant)
