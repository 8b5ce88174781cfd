"""Plain Python values into request messages: keyword arguments named as the proto fields,
enums by their short name ("all", "prefix", "bm25"), datetimes, dicts and lists."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import common_pb2

M = TypeVar("M", bound=Message)


def memory_input(content: str, **fields: Any) -> common_pb2.MemoryInput:
    """A MemoryInput: ``memory_input("…", type="Decision", tags=["db"], importance=0.8,
    metadata={"by": "ana"}, timestamp=datetime(...))``."""
    return fill(common_pb2.MemoryInput(content=content), fields)


def fill(message: M, fields: Mapping[str, Any]) -> M:
    """Set ``fields`` on ``message`` by name; an unknown name is a TypeError naming it."""
    by_name = message.DESCRIPTOR.fields_by_name
    for name, value in fields.items():
        if value is None:
            continue
        fd = by_name.get(name)
        if fd is None:
            known = ", ".join(sorted(by_name))
            raise TypeError(f"{type(message).__name__} has no field {name!r} (fields: {known})")
        _set(message, fd, value)
    return message


def _repeated(fd: Any) -> bool:
    # protobuf 7 dropped `label` for `is_repeated`, which older releases lack.
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def _set(message: Message, fd: Any, value: Any) -> None:
    target = getattr(message, fd.name)
    if _repeated(fd) and not fd.message_type:
        if isinstance(value, str):
            value = [value]  # tags="db" means tags=["db"]
        target.extend(_scalar(fd, v) for v in value)
    elif fd.message_type is None:
        setattr(message, fd.name, _scalar(fd, value))
    elif isinstance(value, Message):
        target.CopyFrom(value)
    elif fd.message_type.full_name == "google.protobuf.Timestamp":
        target.CopyFrom(timestamp(value))
    elif fd.message_type.full_name == "google.protobuf.Struct":
        target.CopyFrom(struct(value))
    else:
        fill(target, value)


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.enum_type is not None:
        return enum_value(fd.enum_type, value)
    if fd.type == FieldDescriptor.TYPE_STRING and isinstance(value, datetime):
        return _aware(value).isoformat()
    return value


def enum_value(enum: EnumDescriptor, value: Any) -> int:
    """An enum by number, full name (TAG_MODE_ALL) or short name ("all", "hybrid-graph")."""
    if isinstance(value, int):
        return value
    wanted = str(value).upper().replace("-", "_")
    for v in enum.values:
        if v.name == wanted or v.name.endswith(f"_{wanted}"):
            return int(v.number)
    names = ", ".join(v.name for v in enum.values)
    raise ValueError(f"{value!r} is not a {enum.name} ({names})")


def timestamp(value: datetime | str) -> Timestamp:
    """A Timestamp from a datetime (naive = UTC) or an ISO-8601 string ("Z" too: what an
    export writes, which Python 3.10's fromisoformat does not read)."""
    if isinstance(value, str):
        value = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        when = datetime.fromisoformat(value)
    else:
        when = value
    ts = Timestamp()
    ts.FromDatetime(_aware(when))
    return ts


def struct(value: Mapping[str, Any]) -> Struct:
    s = Struct()
    s.update(dict(value))
    return s


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)  # noqa: UP017 - Python 3.10
