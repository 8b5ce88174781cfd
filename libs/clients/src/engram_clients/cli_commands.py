"""What each `engram` command does with the SDK client; cli.py parses the flags into them.

Every command takes the client and its parsed flags and returns the exit code; a failed
call raises the SDK's EngramError, which cli.main reports with its code and field.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import IO, Any, cast

from google.protobuf import json_format
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, gateway_pb2
from engram_client import Engram, Event
from engram_clients import transfer

DEFAULT_LIMIT = 5
Command = Callable[[Engram, argparse.Namespace], int]


def _parsed(flag: str, fields: dict[str, Any], message: Message) -> dict[str, Any]:
    """The fields a JSON flag gives, checked against ``message``'s (a field it has not is a
    ValueError naming the flag), as SDK keyword arguments."""
    try:
        return transfer.fields_of(json_format.ParseDict(fields, message))
    except json_format.ParseError as err:
        raise ValueError(f"{flag}: {err}") from err


def memory_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The MemoryInput fields of store/update: --memory first, the flags over it."""
    fields = _parsed("--memory", args.memory, common_pb2.MemoryInput())
    if args.content is not None:
        fields["content"] = args.content
    if args.tag:
        fields["tags"] = [*fields.get("tags", ()), *args.tag]
    if args.type:
        fields["type"] = args.type
    if args.importance is not None:
        fields["importance"] = args.importance
    return fields


def recall_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The RecallRequest fields the recall flags describe: --request first, the flags over
    it; what no flag sets is left to the server."""
    fields = _parsed("--request", args.request, gateway_pb2.RecallRequest())
    fields.pop("query", None)
    fields["limit"] = args.limit if args.limit is not None else fields.get("limit", DEFAULT_LIMIT)
    for name, more in (
        ("tags", args.tag),
        ("exclude_tags", args.exclude_tag),
        ("types", args.type),
    ):
        if more:
            fields[name] = [*fields.get(name, ()), *more]
    flags = {
        "tag_mode": args.tag_mode,
        "mode": args.mode,
        "time_query": args.time or None,
        "token_budget": args.token_budget or None,
        "rerank": args.rerank,
        "min_sequence": args.min_sequence or None,
        "profile": args.profile or None,
    }
    fields.update({k: v for k, v in flags.items() if v is not None})
    return fields


def show(message: Message) -> None:
    print(json.dumps(json_format.MessageToDict(message), indent=2), flush=True)


def line(text: str) -> None:
    print(text, flush=True)


def quiet_stdout() -> None:
    """After a reader went away (`| head`): stdout goes nowhere, so the interpreter's last
    flush does not fail either."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def store(engram: Engram, args: argparse.Namespace) -> int:
    fields = dict(args.fields)
    done = engram.store(fields.pop("content"), **fields)
    show(gateway_pb2.StoreResponse(id=done.id, sequence=done.sequence, duplicate=done.duplicate))
    return 0


def recall(engram: Engram, args: argparse.Namespace) -> int:
    show(engram.recall(args.query, **args.fields).proto)
    return 0


def update(engram: Engram, args: argparse.Namespace) -> int:
    show(engram.update(args.id, **args.fields).proto)
    return 0


def get(engram: Engram, args: argparse.Namespace) -> int:
    show(gateway_pb2.GetResponse(memory=engram.get(args.id).proto))
    return 0


def delete(engram: Engram, args: argparse.Namespace) -> int:
    show(engram.delete(args.id).proto)
    return 0


def related(engram: Engram, args: argparse.Namespace) -> int:
    found = engram.related(args.id, depth=args.depth, limit=args.limit)
    show(gateway_pb2.RelatedResponse(related=[r.proto for r in found]))
    return 0


def associate(engram: Engram, args: argparse.Namespace) -> int:
    written = engram.associate(args.source_id, args.target_id, args.type, strength=args.strength)
    show(written.proto)
    return 0


def stats(engram: Engram, args: argparse.Namespace) -> int:
    show(engram.stats(args.tenant).proto)
    return 0


def listing(engram: Engram, args: argparse.Namespace) -> int:
    """One JSON line per memory (JSONL), as the listing pages in."""
    filters = {
        "tags": args.tag,
        "types": args.type,
        "tag_mode": args.tag_mode,
        "include_archived": args.include_archived,
        "page_size": args.page_size,
        "cursor": args.cursor,
    }
    memories = engram.list(**{k: v for k, v in filters.items() if v})
    for memory in itertools.islice(memories, args.limit or None):
        line(json.dumps(json_format.MessageToDict(memory.proto), ensure_ascii=False))
    return 0


def event_line(event: Event, as_json: bool) -> str:
    """``sequence kind memory_id`` and what changed: the content, or the relation."""
    if as_json:
        return json.dumps(json_format.MessageToDict(event.proto), ensure_ascii=False)
    what = ""
    if event.memory is not None:
        what = json.dumps(event.memory.content, ensure_ascii=False)
    elif event.relation is not None:
        what = f"{event.relation.type} -> {event.relation.target_id}"
    return f"{event.sequence} {event.kind} {event.memory_id} {what}".rstrip()


def subscribe(engram: Engram, args: argparse.Namespace) -> int:
    """A line per event until Ctrl-C (cli.main ends it quietly)."""
    after = None if args.from_sequence is None else max(args.from_sequence - 1, 0)
    for event in engram.subscribe(tags=args.tag, types=args.type, after_sequence=after):
        line(event_line(event, args.json))
    return 0


def sync(engram: Engram, args: argparse.Namespace) -> int:
    show(engram.sync(args.store, dry_run=args.dry_run, tenant=args.tenant).proto)
    return 0


def rebuild(engram: Engram, args: argparse.Namespace) -> int:
    if args.store == "status":
        show(engram.rebuild_status(args.tenant))
    else:
        show(engram.rebuild(args.store, embedding_model=args.embedding_model).proto)
    return 0


def dead_letters(engram: Engram, args: argparse.Namespace) -> int:
    if args.action == "list":
        letters = engram.dead_letters(
            tenant=args.tenant, page_size=args.page_size, after=args.after
        )
        show(admin_pb2.ListDeadLettersResponse(dead_letters=[d.proto for d in letters]))
    else:
        show(engram.replay_dead_letters(args.sequence, tenant=args.tenant).proto)
    return 0


def delete_tenant(engram: Engram, args: argparse.Namespace) -> int:
    done = engram.delete_tenant(args.tenant, confirm=args.confirm, dry_run=args.dry_run)
    if not args.wait or args.dry_run:
        show(done.proto)
        return 0
    while not (status := engram.delete_tenant_status(args.tenant, done.sequence)).applied:
        time.sleep(args.poll)
    show(status.proto)
    return 0


_FINISHED = (admin_pb2.PASS_STATE_SUCCEEDED, admin_pb2.PASS_STATE_FAILED)


def _progress(name: str, run: admin_pb2.PassRun | None) -> str:
    """One pass of the followed run, as a line."""
    if run is None or run.state == admin_pb2.PASS_STATE_PENDING:
        return f"{name}: pending"
    state = admin_pb2.PassState.Name(run.state).removeprefix("PASS_STATE_").lower()
    if run.state == admin_pb2.PASS_STATE_RUNNING:
        of = f"/{run.total}" if run.total else ""
        return f"{name}: running, {run.phase or 'starting'} {run.done}{of} ({run.duration_s:.0f}s)"
    changes = ", ".join(f"{c.kind} {c.count}" for c in run.changes) or "no change"
    why = f": {run.error}" if run.error else ""
    return f"{name}: {state} in {run.duration_s:.1f}s ({changes}){why}"


def _follow(
    engram: Engram, started: admin_pb2.ConsolidateResponse, args: argparse.Namespace
) -> tuple[admin_pb2.ConsolidationStatusResponse, bool]:
    """Poll until every pass of the run has finished, a line on stderr whenever one moves
    on; the status of those passes, and whether all succeeded."""
    shown: dict[int, tuple[int, str, int]] = {}
    while True:
        status = engram.consolidation_status(args.tenant)
        mine = {
            p.mode: p.last_run
            for p in status.passes
            if p.mode in started.passes and p.last_run.run_id == started.run_id
        }
        for mode in started.passes:
            run = mine.get(mode)
            seen = (run.state, run.phase, run.done) if run is not None else (0, "", 0)
            if shown.get(mode) != seen:
                shown[mode] = seen
                name = admin_pb2.ConsolidationMode.Name(mode).removeprefix("CONSOLIDATION_MODE_")
                print(_progress(name.lower(), run), file=sys.stderr, flush=True)
        if len(mine) == len(started.passes) and all(r.state in _FINISHED for r in mine.values()):
            del status.passes[:]
            del status.syncs[:]
            status.passes.extend(admin_pb2.PassStatus(mode=m, last_run=r) for m, r in mine.items())
            ok = all(r.state == admin_pb2.PASS_STATE_SUCCEEDED for r in mine.values())
            return status, ok
        time.sleep(args.poll)


def consolidate(engram: Engram, args: argparse.Namespace) -> int:
    if args.mode == "status":
        show(engram.consolidation_status(args.tenant))
        return 0
    run = engram.consolidate(args.mode, dry_run=args.dry_run, tenant=args.tenant)
    if not args.wait:
        show(run.proto)
        return 0
    status, ok = _follow(engram, cast(admin_pb2.ConsolidateResponse, run.proto), args)
    show(status)
    return 0 if ok else 1


def opened(path: str, mode: str) -> AbstractContextManager[IO[str]]:
    """The file, or stdout/stdin for "-" (left open: the interpreter owns them)."""
    if path == "-":
        return nullcontext(sys.stdout if mode == "w" else sys.stdin)
    return open(path, mode, encoding="utf-8")


def export(engram: Engram, args: argparse.Namespace) -> int:
    filters = {"tags": args.tag, "types": args.type, "include_archived": args.include_archived}
    with transfer.progress_bar() as bar, opened(args.output, "w") as out:
        count = transfer.export(engram, filters, out, bar)
    print(f"exported {count} memories", file=sys.stderr)
    return 0


def import_(engram: Engram, args: argparse.Namespace) -> int:
    with opened(args.file, "r") as source:
        lines = transfer.read_lines(source)
    with transfer.progress_bar() as bar:
        done = transfer.import_lines(engram, lines, args.batch_size, bar)
    print(
        f"imported {done.stored} memories ({done.duplicates} already there), "
        f"{done.relations} relations ({done.skipped} to missing memories skipped)",
        file=sys.stderr,
    )
    return 0


COMMANDS: dict[str, Command] = {
    "store": store,
    "recall": recall,
    "update": update,
    "get": get,
    "delete": delete,
    "related": related,
    "associate": associate,
    "stats": stats,
    "list": listing,
    "subscribe": subscribe,
    "sync": sync,
    "rebuild": rebuild,
    "dead-letters": dead_letters,
    "delete-tenant": delete_tenant,
    "consolidate": consolidate,
    "export": export,
    "import": import_,
}
