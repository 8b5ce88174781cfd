"""Mutations of protobuf requests for fuzzing a gRPC API: random field values (edge
numbers, NaN and infinities, odd strings and timestamps, unknown enum values, deep
structs) and raw byte damage of the serialized message."""

from __future__ import annotations

import contextlib
import math
import random
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

INTS = (0, 1, -1, 2, 7, 100, 101, 1000, 1001, 2**31 - 1, -(2**31), 2**32, 2**62)
UINTS = (0, 1, 2, 1000, 2**31, 2**32 - 1, 2**63, 2**64 - 1)
FLOATS = (0.0, -0.0, 0.5, 1.0, 1.5, -1.0, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf)
STRINGS = (
    "",
    " ",
    "*",
    "a",
    "x" * 300,
    "é" * 5000,
    "\x00",
    "\ud7ff\ue000",
    "🙂" * 40,
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
    "2024-02-30",
    "last 7 days",
    "between 2024-01 and 2024-03",
    "America",
    "Etc",
    "Europe/Berlin",
    "Ünïcödé/Zone",
    "+99:99",
    "tag:" + "t" * 200,
    "metadata:key",
    "RELATES_TO",
    "relates to",
    "00000000-0000-0000-0000-000000000000",
    "../../etc/passwd",
    "%s%n",
    "'; DROP TABLE memories; --",
    '{"a": 1}',
)


class Mutator:
    """Random, reproducible (seeded) mutations; ``ids`` are real memory ids to mix in."""

    def __init__(self, seed: int, ids: list[str]) -> None:
        self._rng = random.Random(seed)
        self._ids = ids

    def mutate(self, request: Message) -> Message:
        """A copy of ``request`` with one to four fields set to random values."""
        out = type(request)()
        out.CopyFrom(request)
        for _ in range(self._rng.randint(1, 4)):
            self._mutate_message(out, depth=0)
        return out

    def damage(self, data: bytes) -> bytes:
        """Flip, cut, insert or append bytes of a serialized message."""
        rng, buf = self._rng, bytearray(data)
        for _ in range(rng.randint(1, 6)):
            choice = rng.randrange(5)
            at = rng.randrange(len(buf) + 1)
            if choice == 0 and buf:
                buf[min(at, len(buf) - 1)] ^= 1 << rng.randrange(8)
            elif choice == 1:
                del buf[at:]
            elif choice == 2:
                buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif choice == 3:
                buf[at:at] = b"\xc3\x28\xff\xfe"  # invalid UTF-8
            else:
                buf += bytes([rng.randrange(1, 256)]) + _varint(rng.choice(UINTS))
        return bytes(buf)

    def _mutate_message(self, msg: Message, depth: int) -> None:
        fields: list[FieldDescriptor] = list(msg.DESCRIPTOR.fields)  # type: ignore[arg-type]
        if not fields:
            return
        fd = self._rng.choice(fields)
        if isinstance(msg, struct_pb2.Struct):
            msg.Clear()
            msg.update(self._struct_value(depth))
            return
        if fd.is_repeated:
            self._mutate_repeated(msg, fd, depth)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            sub = getattr(msg, fd.name)
            if sub.DESCRIPTOR.full_name == "google.protobuf.Struct":
                sub.Clear()
                sub.update(self._struct_value(depth))
            elif depth < 4:
                self._mutate_message(sub, depth + 1)
        else:
            self._set_scalar(msg, fd)

    def _mutate_repeated(self, msg: Message, fd: FieldDescriptor, depth: int) -> None:
        items = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            return  # maps: left as the seed has them
        n = self._rng.choice((0, 1, 3, 9, 65, 101, 1001))
        del items[:]
        for _ in range(n):
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                sub = items.add()
                if depth < 3:
                    self._mutate_message(sub, depth + 1)
            else:
                items.append(self._scalar(fd))

    def _set_scalar(self, msg: Message, fd: FieldDescriptor) -> None:
        # A value the field cannot hold (an int too big for it): the seed's value stays.
        with contextlib.suppress(ValueError, TypeError):
            setattr(msg, fd.name, self._scalar(fd))

    def _scalar(self, fd: FieldDescriptor) -> object:
        rng, t = self._rng, fd.type
        if t == FieldDescriptor.TYPE_STRING:
            return rng.choice((*STRINGS, *self._ids, *self._ids))
        if t == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return rng.choice(FLOATS)
        if t == FieldDescriptor.TYPE_ENUM:
            known = [v.number for v in fd.enum_type.values] if fd.enum_type else []
            return rng.choice((*known, 99, -1))
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64):
            limit = 2**32 - 1 if t == FieldDescriptor.TYPE_UINT32 else 2**64 - 1
            return min(rng.choice(UINTS), limit)
        if t == FieldDescriptor.TYPE_BYTES:
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 16)))
        value = rng.choice(INTS)
        bits = 32 if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32) else 64
        return max(min(value, 2 ** (bits - 1) - 1), -(2 ** (bits - 1)))

    def _struct_value(self, depth: int) -> dict[str, Any]:
        rng = self._rng
        kind = rng.randrange(4)
        if kind == 0:  # deep nesting
            value: Any = "leaf"
            for _ in range(rng.choice((8, 31, 32, 33, 40, 64))):
                value = {"a": value}
            return {"deep": value}
        if kind == 1:
            return {"n": rng.choice(FLOATS), "m": [rng.choice(FLOATS)]}
        if kind == 2:
            return {rng.choice(STRINGS) or "k": rng.choice(STRINGS)}
        return {f"k{i}": i for i in range(rng.choice((1, 100, 1000)))}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
