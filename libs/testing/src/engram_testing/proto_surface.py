"""The wire surface of the public API and the check that changes to it are deliberate.

The surface (every message field by number, enum value, RPC signature) is read from the
generated descriptors and compared with the committed ``proto/api-lock.json``. A change a
deployed client would notice — a field renumbered, retyped, renamed or dropped without being
reserved, an enum value or RPC gone or changed — is *breaking*; an addition is not, but it
still leaves the lock stale until ``make proto-lock`` records it, so every change to the API
shows up in review as a diff of the lock.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, FileDescriptor

import engram

Surface = dict[str, dict[str, str]]
"""kind ("messages", "enums", "services") → qualified element → signature.

A message's entry is ``<name>.<number>`` → ``<field name> <type> <label>``; an enum's is
``<name>.<number>`` → value name; a service's is the RPC → its request and response types.
"""

LOCK = Path(__file__).resolve().parents[4] / "proto" / "api-lock.json"


def api_files() -> Iterator[FileDescriptor]:
    """Every generated ``*_pb2`` module of the ``engram`` API package."""
    for info in pkgutil.walk_packages(engram.__path__, "engram."):
        if info.name.endswith("_pb2"):
            yield importlib.import_module(info.name).DESCRIPTOR


_SCALARS = {
    number: name.removeprefix("TYPE_").lower()
    for name, number in vars(FieldDescriptor).items()
    if name.startswith("TYPE_") and isinstance(number, int)
}


def _type(field: FieldDescriptor) -> str:
    if field.message_type is not None:
        return field.message_type.full_name
    if field.enum_type is not None:
        return field.enum_type.full_name
    return _SCALARS[field.type]


def _label(field: FieldDescriptor) -> str:
    if field.is_repeated:
        return "repeated"
    return "optional" if field.has_presence and field.containing_oneof is None else "singular"


def _message(desc: Descriptor, out: Surface) -> None:
    for field in desc.fields:
        oneof = f" oneof={field.containing_oneof.name}" if field.containing_oneof else ""
        out["messages"][f"{desc.full_name}.{field.number}"] = (
            f"{field.name} {_type(field)} {_label(field)}{oneof}"
        )
    for nested in desc.nested_types:
        if not nested.GetOptions().map_entry:
            _message(nested, out)
    for enum in desc.enum_types:
        _enum(enum, out)


def _enum(desc: EnumDescriptor, out: Surface) -> None:
    for value in desc.values:
        out["enums"][f"{desc.full_name}.{value.number}"] = value.name


def _stream(streaming: bool) -> str:
    return "stream " if streaming else ""


def surface(files: Iterator[FileDescriptor] | None = None) -> Surface:
    out: Surface = {"messages": {}, "enums": {}, "services": {}}
    for file in files if files is not None else api_files():
        for message in file.message_types_by_name.values():
            _message(message, out)
        for enum in file.enum_types_by_name.values():
            _enum(enum, out)
        for service in file.services_by_name.values():
            for method in service.methods:
                takes = _stream(method.client_streaming) + method.input_type.full_name
                gives = _stream(method.server_streaming) + method.output_type.full_name
                out["services"][method.full_name] = f"{takes} -> {gives}"
    return out


@dataclass(frozen=True)
class Change:
    kind: str
    element: str
    was: str
    now: str

    def __str__(self) -> str:
        return f"{self.kind} {self.element}: {self.was or '(absent)'} -> {self.now or '(absent)'}"


def breaking(locked: Mapping[str, Mapping[str, str]], current: Surface) -> list[Change]:
    """What the current surface removes or changes of the locked one."""
    changes: list[Change] = []
    for kind, elements in locked.items():
        now = current.get(kind, {})
        for element, was in sorted(elements.items()):
            if now.get(element) != was:
                changes.append(Change(kind, element, was, now.get(element, "")))
    return changes


def additions(locked: Mapping[str, Mapping[str, str]], current: Surface) -> list[str]:
    return sorted(
        f"{kind} {element}"
        for kind, elements in current.items()
        for element in elements
        if element not in locked.get(kind, {})
    )


def read_lock(path: Path = LOCK) -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    return data


def write_lock(path: Path = LOCK) -> None:
    path.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")


def main() -> int:
    """``python -m engram_testing.proto_surface [--write]``: check (or rewrite) the lock."""
    if "--write" in sys.argv[1:]:
        write_lock()
        print(f"wrote {LOCK.name}")
        return 0
    locked, current = read_lock(), surface()
    changes, added = breaking(locked, current), additions(locked, current)
    for change in changes:
        print(f"breaking: {change}")
    for element in added:
        print(f"not in the lock: {element}")
    if changes or added:
        print("the API changed: if deliberate, run 'make proto-lock', commit proto/api-lock.json")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
