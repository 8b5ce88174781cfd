"""Requests that do not decode: which field is at fault, by its proto path.

A gRPC deserializer that raises makes grpcio answer UNKNOWN with the exception's text, so
the server's deserializers return `Malformed` instead and the interceptor turns it into
INVALID_ARGUMENT. `locate` finds the field: it splits the wire format one level at a time,
finds the first field of the level that fails by bisecting on prefixes of the level (each
re-parsed inside its enclosing fields, so protobuf's depth limit counts the same) and
descends into it. A Struct is named as its JSON (``memory.metadata.a.b``, ``...list[2]``).
It runs only on bytes that already failed, within a budget of bytes parsed, so a hostile
request costs a bounded multiple of decoding it; past the budget the field found so far is
named.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError, Message

log = logging.getLogger(__name__)
ROOT = "request"  # the field named when no field of the request can be told apart
_STRUCT = "google.protobuf.Struct"
_STRUCT_ENTRY = "google.protobuf.Struct.FieldsEntry"
_VALUE = "google.protobuf.Value"
_LIST = "google.protobuf.ListValue"
_MAX_KEY = 64
_LENGTH_DELIMITED = 2
CORRUPT = "not a valid protobuf encoding (truncated or corrupt)"
# Bounds on the search: fields of one level told apart, levels descended (protobuf's own
# depth limit), bytes parsed per byte sent.
MAX_FIELDS = 10_000
MAX_DEPTH = 100
BUDGET_FACTOR = 16
BUDGET_BASE = 1 << 20  # a small request is searched to the end whatever its depth
_REST = -1  # "more fields than MAX_FIELDS": none of them named


@dataclass(frozen=True, slots=True)
class Malformed:
    """What a tolerant deserializer returns for bytes that are not the request."""

    field: str
    reason: str


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer`` returning `Malformed` where it would raise on the bytes."""
    if deserializer is None:
        return None
    cls = getattr(deserializer, "__self__", None)
    message_type = cls if isinstance(cls, type) and issubclass(cls, Message) else None

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except (DecodeError, RecursionError) as exc:
            try:
                if message_type is not None:
                    return locate(message_type, raw)
            except Exception:  # naming the field is a courtesy; the refusal is what counts
                log.exception("cannot locate the undecodable field of a %s", message_type)
            return Malformed(ROOT, _reason(exc))

    return deserialize


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "UTF-8" in text:
        return "not valid UTF-8"
    if "Depth" in text or isinstance(exc, RecursionError):
        return "nested deeper than protobuf's limit of 100 messages"
    return CORRUPT


class _Corrupt(Exception):
    """The bytes stop being a varint."""


@dataclass(frozen=True, slots=True)
class _Field:
    number: int
    wire: int
    key: bytes  # the field's tag as encoded
    value: bytes  # a length-delimited field's payload; otherwise the encoded value
    whole: bytes  # tag and value as they were in the message


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data) and shift < 70:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise _Corrupt


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _split(data: bytes) -> tuple[list[_Field], int | None]:
    """The fields of one message level, in order, up to where the bytes stop making sense
    (then the number of the field that broke off, 0 if not even its tag was read), and at
    most `MAX_FIELDS` of them (the rest is not told apart: `_REST`)."""
    out: list[_Field] = []
    pos = 0
    while pos < len(data):
        if len(out) == MAX_FIELDS:
            return out, _REST
        start = pos
        try:
            tag, pos = _varint(data, pos)
        except _Corrupt:
            return out, 0
        number, wire = tag >> 3, tag & 7
        tag_end = value_start = pos
        try:
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1 or wire == 5:
                pos += 8 if wire == 1 else 4
            elif wire == _LENGTH_DELIMITED:
                size, value_start = _varint(data, pos)
                pos = value_start + size
            else:  # groups: not in proto3, and not worth naming
                return out, number
        except _Corrupt:
            return out, number
        if number == 0 or pos > len(data):
            return out, number
        value = data[value_start:pos]
        out.append(_Field(number, wire, data[start:tag_end], value, data[start:pos]))
    return out, None


def _struct_key(entry: bytes) -> str | None:
    """The key of a Struct's entry, or None when it is not UTF-8."""
    for f in _split(entry)[0]:
        if f.number == 1 and f.wire == _LENGTH_DELIMITED:
            try:
                return f.value.decode("utf-8")[:_MAX_KEY]
            except UnicodeDecodeError:
                return None
    return ""


def _name(path: str, desc: Any, fd: Any, index: int) -> str:
    """The proto path of ``fd`` of a ``desc`` at ``path`` (a Struct's entries and values
    keep their JSON path; the caller adds a Struct's key)."""
    if desc.full_name in (_STRUCT, _STRUCT_ENTRY, _VALUE):
        return path
    if desc.full_name == _LIST:
        return f"{path}[{index}]"
    name = f"{path}.{fd.name}" if path else fd.name
    return f"{name}[{index}]" if fd.is_repeated else name


class _Spent(Exception):
    """The probe's budget ran out: the field found so far is named."""


class _Probe:
    """Parses parts of a request inside the fields that enclose them, within a budget of
    bytes parsed (a multiple of the request's size), so a hostile request costs a bounded
    multiple of decoding it."""

    def __init__(self, cls: type[Message], size: int) -> None:
        self._cls = cls
        self._left = BUDGET_FACTOR * size + BUDGET_BASE
        self.chain: list[bytes] = []  # the tags of the enclosing fields, outermost first
        self.error: BaseException = DecodeError()

    def fails(self, part: bytes) -> bool:
        for key in reversed(self.chain):
            part = key + _encode_varint(len(part)) + part
        self._left -= len(part)
        if self._left < 0:
            raise _Spent
        try:
            self._cls.FromString(part)
        except (DecodeError, RecursionError) as exc:
            self.error = exc
            return True
        return False

    def first_failing(self, fields: list[_Field]) -> int | None:
        """The index of the first field whose prefix of the level fails (bisection: once a
        prefix fails, every longer one does), or None when all of them decode."""
        if not fields or not self.fails(b"".join(f.whole for f in fields)):
            return None
        lo, hi = 0, len(fields) - 1  # the answer is within [lo, hi]; self.error is hi's
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fails(b"".join(f.whole for f in fields[: mid + 1])):
                hi = mid
            else:
                lo = mid + 1
        return lo


def locate(cls: type[Message], raw: bytes) -> Malformed:
    """The innermost field of ``raw`` that keeps it from decoding as ``cls``."""
    probe = _Probe(cls, len(raw))
    probe.fails(raw)  # the reason, should no field be told apart
    desc, data, path = cls.DESCRIPTOR, raw, ""
    try:
        for _ in range(MAX_DEPTH):
            fields, broken = _split(data)
            at = probe.first_failing(fields)
            if at is None:
                return _broken(path, desc, fields, broken, probe)
            f = fields[at]
            fd = desc.fields_by_number.get(f.number)
            if fd is None:
                return Malformed(path or ROOT, _reason(probe.error))
            name = _name(path, desc, fd, sum(g.number == f.number for g in fields[:at]))
            if fd.message_type is None or f.wire != _LENGTH_DELIMITED:
                return Malformed(name or ROOT, _reason(probe.error))
            if desc.full_name == _STRUCT:
                key = _struct_key(f.value)
                if key is None:
                    return Malformed(name, "a key is not valid UTF-8")
                name = f"{name}.{key}"
            probe.chain.append(f.key)
            desc, data, path = fd.message_type, f.value, name
    except _Spent:
        pass
    return Malformed(path or ROOT, _reason(probe.error))


def _broken(
    path: str, desc: Any, fields: list[_Field], broken: int | None, probe: _Probe
) -> Malformed:
    """What to name when no whole field of the level fails: the one that broke off."""
    fd = desc.fields_by_number.get(broken) if broken else None
    if fd is not None:
        name = _name(path, desc, fd, sum(g.number == broken for g in fields))
        return Malformed(name, CORRUPT)
    if broken is not None and broken != _REST:
        return Malformed(path or ROOT, CORRUPT)
    return Malformed(path or ROOT, _reason(probe.error))
