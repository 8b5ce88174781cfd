"""Requests that do not decode: which field is at fault, by its proto path.

A gRPC deserializer that raises makes grpcio answer UNKNOWN with the exception's text, so
the server's deserializers return `Malformed` instead and the interceptor turns it into
INVALID_ARGUMENT. `locate` finds the field: it splits the wire format one level at a time and
re-parses the request holding only one field of that level (inside its enclosing fields, so
protobuf's depth limit counts the same), descending into the first field that fails alone.
A Struct is named as its JSON (``memory.metadata.a.b``, ``...list[2]``). It runs only on
bytes that already failed, and each step parses at most the request's own size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
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
    return "not a valid protobuf encoding (truncated or corrupt)"


class _Corrupt(Exception):
    def __init__(self, number: int | None) -> None:
        super().__init__(number)
        self.number = number


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
    raise _Corrupt(None)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data: bytes) -> Iterator[_Field]:
    """The fields of one message level, in order; `_Corrupt` where the bytes stop making sense."""
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _varint(data, pos)
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
                raise _Corrupt(number)
        except _Corrupt:
            raise _Corrupt(number) from None
        if number == 0 or pos > len(data):
            raise _Corrupt(number)
        yield _Field(number, wire, data[start:tag_end], data[value_start:pos], data[start:pos])


def _struct_key(entry: bytes) -> str | None:
    """The key of a Struct's entry, or None when it is not UTF-8."""
    try:
        for f in _fields(entry):
            if f.number == 1 and f.wire == _LENGTH_DELIMITED:
                return f.value.decode("utf-8")[:_MAX_KEY]
    except (_Corrupt, UnicodeDecodeError):
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


def locate(cls: type[Message], raw: bytes) -> Malformed:
    """The innermost field of ``raw`` that alone keeps it from decoding as ``cls``."""
    chain: list[bytes] = []  # the tags of the enclosing fields, outermost first

    def failure(part: bytes) -> BaseException | None:
        for key in reversed(chain):
            part = key + _encode_varint(len(part)) + part
        try:
            cls.FromString(part)
        except (DecodeError, RecursionError) as exc:
            return exc
        return None

    desc, data, path = cls.DESCRIPTOR, raw, ""
    while True:
        seen: dict[int, int] = {}
        try:
            for f in _fields(data):
                index = seen[f.number] = seen.get(f.number, -1) + 1
                exc = failure(f.whole)
                if exc is None:
                    continue
                fd = desc.fields_by_number.get(f.number)
                if fd is None:
                    return Malformed(path or ROOT, _reason(exc))
                name = _name(path, desc, fd, index)
                if fd.message_type is None or f.wire != _LENGTH_DELIMITED:
                    return Malformed(name or ROOT, _reason(exc))
                if desc.full_name == _STRUCT:
                    key = _struct_key(f.value)
                    if key is None:
                        return Malformed(name, "a key is not valid UTF-8")
                    name = f"{name}.{key}"
                chain.append(f.key)
                desc, data, path = fd.message_type, f.value, name
                break
            else:  # no field fails alone: the level as a whole is at fault
                return Malformed(path or ROOT, _reason(failure(data) or DecodeError()))
        except _Corrupt as corrupt:
            fd = desc.fields_by_number.get(corrupt.number or 0)
            index = seen.get(corrupt.number or 0, -1) + 1
            name = _name(path, desc, fd, index) if fd is not None else path
            return Malformed(name or ROOT, "not a valid protobuf encoding (truncated or corrupt)")
