"""`engram export` and `engram import`: a tenant's memories as JSONL, and back.

The first line is a header (format, version, the embedding model the memories were
embedded with); every other line is one memory with every field and the relations that
start at it. Import stores through StoreBatch keeping each memory's id, with an
idempotency key derived from that id, so a re-run after an interruption stores nothing
twice; then it re-creates the client relations with Associate (system relations are the
workers' and are derived again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from engram.common.v1 import common_pb2
from engram_client import DeadlineExceeded, Engram, NotFound

FORMAT = "engram-export"
VERSION = 1
KEY_PREFIX = "import:"
# Relations Associate does not take: the workers write them and derive them again.
_SYSTEM_ORIGIN = "system"
# How long import waits for its memories to be applied before relating them.
_APPLY_WAIT_S = 120.0


class _Rate(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "-/s", style="progress.data.speed")


def progress_bar(console: Console | None = None) -> Progress:
    """Counts and rate on stderr, so stdout stays the export."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
    )


def to_dict(message: Message) -> dict[str, Any]:
    """Every field, defaults too and null for an unset timestamp or struct; timestamps as
    ISO-8601 (RFC 3339)."""
    out = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for field in message.DESCRIPTOR.fields:
        out.setdefault(field.name, None)
    return out


def header(embedding_model: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "embedding_model": embedding_model,
        "exported_at": datetime.now(UTC).isoformat(),
    }


def _write(out: IO[str], value: dict[str, Any]) -> None:
    out.write(json.dumps(value, ensure_ascii=False, sort_keys=True) + "\n")


def export(engram: Engram, filters: dict[str, Any], out: IO[str], bar: Progress) -> int:
    """Writes the header and every listed memory with its relations; the count written.
    The header's model is the first memory's (the live vector generation stamps each)."""
    task = bar.add_task("export", total=None)
    count, started = 0, False
    for page in engram.list_pages(include_relations=True, **filters):
        if not started:
            started = True
            _write(out, header(page.memories[0].proto.embedding_model if page.memories else ""))
        by_source: dict[str, list[dict[str, Any]]] = {}
        for r in page.relations:
            by_source.setdefault(r.source_id, []).append(to_dict(r.proto))
        for m in page.memories:
            _write(out, {"memory": to_dict(m.proto), "relations": by_source.get(m.id, [])})
        count += len(page.memories)
        bar.update(task, completed=count)
    if not started:
        _write(out, header(""))
    bar.update(task, total=count, completed=count)
    return count


@dataclass(frozen=True, slots=True)
class Line:
    memory: common_pb2.MemoryInput
    relations: tuple[common_pb2.Relation, ...]


def memory_input(memory: common_pb2.Memory) -> common_pb2.MemoryInput:
    """What a client can set of a stored memory, id included."""
    out = common_pb2.MemoryInput(
        id=memory.id,
        content=memory.content,
        type=memory.type,
        tags=memory.tags,
        importance=memory.importance,
        confidence=memory.confidence,
    )
    for name in ("metadata", "timestamp", "t_valid", "t_invalid"):
        if memory.HasField(name):
            getattr(out, name).CopyFrom(getattr(memory, name))
    return out


def read_lines(source: IO[str]) -> list[Line]:
    """Every line of an export, the header checked; ValueError names the bad line."""
    first = source.readline()
    try:
        head = json.loads(first)
    except json.JSONDecodeError as err:
        raise ValueError(f"line 1: not an export header: {err}") from err
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(f"line 1: not an {FORMAT} header")
    if head.get("version") != VERSION:
        raise ValueError(f"line 1: format version {head.get('version')!r}; this reads {VERSION}")
    out = []
    for n, text in enumerate(source, start=2):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
            memory = json_format.ParseDict(
                item["memory"], common_pb2.Memory(), ignore_unknown_fields=True
            )
            relations = tuple(
                json_format.ParseDict(r, common_pb2.Relation(), ignore_unknown_fields=True)
                for r in item.get("relations", [])
            )
        except (json.JSONDecodeError, json_format.ParseError, KeyError, TypeError) as err:
            raise ValueError(f"line {n}: {err}") from err
        out.append(Line(memory_input(memory), relations))
    return out


@dataclass(frozen=True, slots=True)
class Imported:
    stored: int  # new memories
    duplicates: int  # already stored by an earlier run
    relations: int
    skipped: int = 0  # relations to a memory neither in the file nor already stored


def fields_of(message: Message) -> dict[str, Any]:
    """The fields set on ``message``, by name: the keyword arguments an SDK call takes."""
    return {fd.name: value for fd, value in message.ListFields()}


def import_lines(engram: Engram, lines: Sequence[Line], batch: int, bar: Progress) -> Imported:
    task = bar.add_task("memories", total=len(lines))
    items = [
        {**fields_of(line.memory), "idempotency_key": KEY_PREFIX + line.memory.id} for line in lines
    ]
    done = engram.store_many(
        items, batch_size=batch, progress=lambda p: bar.update(task, completed=p.done)
    )
    failed = done.failed
    if failed:
        raise ImportFailed(
            f"{len(failed)} memories not stored ({failed[0].code}: "
            f"{failed[0].message}); run the import again to finish it"
        )
    duplicates = sum(r.duplicate for r in done.results)
    relations = [r for line in lines for r in line.relations if r.origin != _SYSTEM_ORIGIN]
    if relations:
        _applied(engram)
    skipped = _relate(engram, relations, bar)
    return Imported(len(lines) - duplicates, duplicates, len(relations) - skipped, skipped)


def _relate(engram: Engram, relations: Sequence[common_pb2.Relation], bar: Progress) -> int:
    """Associates each relation (the graph merges a repeat); the count whose other end is
    missing (a filtered export's edge out of it)."""
    skipped = 0
    task = bar.add_task("relations", total=len(relations))
    for r in relations:
        props = {"properties": r.properties} if r.HasField("properties") else {}
        try:
            engram.associate(r.source_id, r.target_id, r.type, strength=r.strength, **props)
        except NotFound:
            skipped += 1
        bar.advance(task)
    return skipped


def _applied(engram: Engram) -> None:
    """Waits until the stores hold every imported memory (Associate looks both ends up):
    a recall waits for the client's own writes, within a call's deadline, so a large import
    takes a few."""
    waited = 0.0
    while True:
        try:
            engram.recall("", limit=1)
            return
        except DeadlineExceeded:
            waited += engram.config.timeout_s
            if waited >= _APPLY_WAIT_S:
                raise


class ImportFailed(Exception):
    """Some items of a batch were not stored; a re-run with the same file finishes."""
