"""`engram`: a small command line for the public API (what grpcurl would do, without grpcurl)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import IO, Any, TypeAlias, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients import transfer
from engram_platform.tls_flags import add_tls_flags, flag_credentials, flag_options

_DEFAULT_LIMIT = 5
# What add_subparsers returns: each _add_* function adds its commands to it.
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram", description="Talk to an Engram gateway.")
    p.add_argument("--addr", default=os.environ.get("ENGRAM_ADDR", "127.0.0.1:50051"))
    p.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN", "dev-token"))
    add_tls_flags(p)
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_store, _add_recall, _add_by_id, _add_repair, _add_transfer, _add_consolidate):
        add(sub)
    return p


def _add_store(sub: _Commands) -> None:
    s = sub.add_parser("store", help="store one memory")
    s.add_argument("content", nargs="?", help="the text (or `content` in --memory)")
    s.add_argument("--type", default="")
    s.add_argument("--tag", action="append", default=[])
    s.add_argument("--importance", type=float)
    s.add_argument(
        "--memory",
        type=_json_object,
        default={},
        metavar="JSON",
        help='more MemoryInput fields, e.g. \'{"metadata": {"ticket": "OPS-12"}, '
        '"timestamp": "2024-05-08T13:56:00Z"}\'',
    )


def _add_recall(sub: _Commands) -> None:
    r = sub.add_parser(
        "recall",
        help="recall (hybrid unless --mode says otherwise)",
        description="Recall memories. The flags set the common RecallRequest fields; "
        "--request sets any other, as JSON with the proto's field names.",
    )
    r.add_argument("query", help='the question; "" or "*" lists trending memories')
    r.add_argument("--limit", type=int, help=f"results (default {_DEFAULT_LIMIT})")
    r.add_argument("--tag", action="append", default=[], help="only memories with this tag")
    r.add_argument("--tag-mode", choices=("any", "all"), help="with several --tag")
    r.add_argument("--exclude-tag", action="append", default=[])
    r.add_argument("--type", action="append", default=[], help="only memories of this type")
    r.add_argument("--mode", choices=tuple(_MODES), help="retrieval streams (default hybrid)")
    r.add_argument(
        "--time",
        default="",
        help='a window: "last 7 days", "2024-01 to 2024-03", "after May 3, 2024"',
    )
    r.add_argument("--token-budget", type=int, default=0, help="pack results into `context`")
    r.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None)
    r.add_argument("--min-sequence", type=int, default=0)
    r.add_argument(
        "--request",
        type=_json_object,
        default={},
        metavar="JSON",
        help='more fields, e.g. \'{"expand_relations": true, "state_mode": "STATE_MODE_ALL"}\'',
    )


def _add_by_id(sub: _Commands) -> None:
    for name in ("get", "delete", "related"):
        sub.add_parser(name, help=f"{name} by id").add_argument("id")
    a = sub.add_parser("associate", help="relate two memories")
    a.add_argument("source_id")
    a.add_argument("target_id")
    a.add_argument("--type", default="RELATES_TO")
    a.add_argument("--strength", type=float, default=0.5)
    t = sub.add_parser("stats", help="counts per store, dead letters and the watermark")
    t.add_argument("--tenant", default="", help="another tenant (a token of tenant '*')")


def _add_repair(sub: _Commands) -> None:
    """The admin commands that check and repair the stores: sync, rebuild, dead letters."""
    y = sub.add_parser("sync", help="check the stores against the log and repair them (admin)")
    y.add_argument("--store", action="append", choices=_STORES, default=[])
    y.add_argument("--dry-run", action="store_true")
    y.add_argument("--tenant", default="")
    b = sub.add_parser(
        "rebuild", help="rebuild a store from the log, or show rebuilds and syncs (admin)"
    )
    b.add_argument("store", choices=(*_STORES, "status"))
    b.add_argument("--embedding-model", default="")
    b.add_argument("--tenant", default="", help="status: also this tenant's syncs")
    d = sub.add_parser(
        "dead-letters", help="list or replay the events the workers could not apply (admin)"
    )
    letters = d.add_subparsers(dest="action", required=True)
    dl = letters.add_parser("list", help="one page of dead letters, oldest first")
    dl.add_argument("--page-size", type=int, default=0, help="1..1000 (default 100)")
    dl.add_argument("--after", type=int, default=0, help="the previous page's next_after")
    dr = letters.add_parser(
        "replay", help="republish dead letters to their original subject, then delete them"
    )
    dr.add_argument(
        "--sequence", type=int, action="append", default=[], help="one letter (default: all)"
    )
    for parser in (dl, dr):
        parser.add_argument("--tenant", default="", help="another tenant (a token of tenant '*')")


def _add_transfer(sub: _Commands) -> None:
    e = sub.add_parser(
        "export", help="the tenant's memories and their relations as JSONL (stdout or -o)"
    )
    e.add_argument("--tag", action="append", default=[], help="only memories with this tag")
    e.add_argument("--type", action="append", default=[], help="only memories of this type")
    e.add_argument("--include-archived", action="store_true")
    e.add_argument("-o", "--output", default="-", help="a file (default stdout)")
    i = sub.add_parser("import", help="store an export's memories and relations (re-runnable)")
    i.add_argument("file", help="a file `engram export` wrote ('-' = stdin)")
    i.add_argument("--batch-size", type=int, default=100, help="memories per StoreBatch")


def _add_consolidate(sub: _Commands) -> None:
    c = sub.add_parser(
        "consolidate",
        help="run consolidation passes now, or show each pass's last run and progress (admin)",
    )
    c.add_argument("mode", choices=(*_PASSES, "all", "status"))
    c.add_argument("--dry-run", action="store_true", help="report what would change")
    c.add_argument("--tenant", default="", help="another tenant (a token of tenant '*')")
    c.add_argument(
        "--wait",
        action="store_true",
        help="follow the run: progress on stderr until every pass has finished, then its "
        "runs (exit 1 if one failed)",
    )
    c.add_argument("--poll", type=float, default=2.0, help="seconds between two looks (--wait)")


def _channel(args: argparse.Namespace) -> grpc.aio.Channel:
    if args.credentials is None:
        return grpc.aio.insecure_channel(args.addr)
    return grpc.aio.secure_channel(args.addr, args.credentials, flag_options(args))


_STORES = ("vector", "lexical", "graph")
_PASSES = ("decay", "associate", "cluster", "forget")
_M = TypeVar("_M", bound=Message)
_MODES = {
    m: gateway_pb2.RecallMode.Value(f"RECALL_MODE_{m.upper()}")
    for m in ("hybrid", "vector", "bm25", "graph", "hybrid_graph")
}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _parsed(flag: str, fields: dict[str, Any], message: _M) -> _M:
    """``message`` with the fields a JSON flag gave; a field it has not is a ValueError."""
    try:
        return json_format.ParseDict(fields, message)
    except json_format.ParseError as err:
        raise ValueError(f"{flag}: {err}") from err


def store_request(args: argparse.Namespace) -> gateway_pb2.StoreRequest:
    """The StoreRequest the store flags describe: --memory first, the flags over it."""
    memory = _parsed("--memory", args.memory, common_pb2.MemoryInput())
    if args.content is not None:
        memory.content = args.content
    if not memory.content:
        raise ValueError("content: give it as the argument or as `content` in --memory")
    memory.tags.extend(args.tag)
    if args.type:
        memory.type = args.type
    if args.importance is not None:
        memory.importance = args.importance
    return gateway_pb2.StoreRequest(memory=memory)


def recall_request(args: argparse.Namespace) -> gateway_pb2.RecallRequest:
    """The RecallRequest the recall flags describe: --request first, the flags over it."""
    request = _parsed("--request", args.request, gateway_pb2.RecallRequest())
    request.query = args.query
    if args.limit is not None:
        request.limit = args.limit
    elif not request.limit:
        request.limit = _DEFAULT_LIMIT
    request.tags.extend(args.tag)
    request.exclude_tags.extend(args.exclude_tag)
    request.types.extend(args.type)
    if args.tag_mode:
        request.tag_mode = common_pb2.TagMode.Value(f"TAG_MODE_{args.tag_mode.upper()}")
    if args.mode:
        request.mode = _MODES[args.mode]
    if args.time:
        request.time_query = args.time
    if args.token_budget:
        request.token_budget = args.token_budget
    if args.rerank is not None:
        request.rerank = args.rerank
    if args.min_sequence:
        request.min_sequence = args.min_sequence
    return request


def _admin_call(
    args: argparse.Namespace, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]
) -> Any:
    stub = admin_pb2_grpc.AdminServiceStub(channel)
    store = {n: admin_pb2.Store.Value(f"STORE_{n.upper()}") for n in _STORES}
    if args.cmd == "consolidate":
        if args.mode == "status":
            status = admin_pb2.ConsolidationStatusRequest(tenant=args.tenant)
            return stub.ConsolidationStatus(status, metadata=metadata)
        mode = admin_pb2.ConsolidationMode.Value(f"CONSOLIDATION_MODE_{args.mode.upper()}")
        run = admin_pb2.ConsolidateRequest(mode=mode, dry_run=args.dry_run, tenant=args.tenant)
        return stub.Consolidate(run, metadata=metadata)
    if args.cmd == "sync":
        request = admin_pb2.SyncRequest(
            tenant=args.tenant, stores=[store[s] for s in args.store], dry_run=args.dry_run
        )
        return stub.Sync(request, metadata=metadata)
    if args.cmd == "dead-letters":
        if args.action == "list":
            page = admin_pb2.ListDeadLettersRequest(
                tenant=args.tenant, page_size=args.page_size, after=args.after
            )
            return stub.ListDeadLetters(page, metadata=metadata)
        replay = admin_pb2.ReplayDeadLettersRequest(tenant=args.tenant, sequences=args.sequence)
        return stub.ReplayDeadLetters(replay, metadata=metadata)
    if args.store == "status":
        rebuilds = admin_pb2.RebuildStatusRequest(tenant=args.tenant)
        return stub.RebuildStatus(rebuilds, metadata=metadata)
    rebuild = admin_pb2.RebuildRequest(
        store=store[args.store], embedding_model=args.embedding_model
    )
    return stub.Rebuild(rebuild, metadata=metadata)


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


async def _follow(
    stub: Any,  # the aio AdminServiceStub
    started: admin_pb2.ConsolidateResponse,
    args: argparse.Namespace,
    metadata: tuple[tuple[str, str], ...],
) -> tuple[admin_pb2.ConsolidationStatusResponse, bool]:
    """Poll until every pass of the run has finished, a line on stderr whenever one moves
    on; the status of those passes, and whether all succeeded."""
    request = admin_pb2.ConsolidationStatusRequest(tenant=args.tenant)
    shown: dict[int, tuple[int, str, int]] = {}
    while True:
        status = await stub.ConsolidationStatus(request, metadata=metadata)
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
        await asyncio.sleep(args.poll)


async def _run(args: argparse.Namespace) -> Message:
    metadata = (("authorization", f"Bearer {args.token}"),)
    async with _channel(args) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        call: Any
        if args.cmd == "consolidate" and args.wait:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            started = await _admin_call(args, channel, metadata)
            status, args.ok = await _follow(admin, started, args, metadata)
            return status
        if args.cmd in ("sync", "rebuild", "consolidate", "dead-letters"):
            call = _admin_call(args, channel, metadata)
        elif args.cmd == "store":
            call = stub.Store(args.built, metadata=metadata)
        elif args.cmd == "recall":
            call = stub.Recall(args.built, metadata=metadata)
        elif args.cmd == "get":
            call = stub.Get(gateway_pb2.GetRequest(id=args.id), metadata=metadata)
        elif args.cmd == "delete":
            call = stub.Delete(gateway_pb2.DeleteRequest(id=args.id), metadata=metadata)
        elif args.cmd == "related":
            call = stub.Related(gateway_pb2.RelatedRequest(id=args.id), metadata=metadata)
        elif args.cmd == "associate":
            request_a = gateway_pb2.AssociateRequest(
                source_id=args.source_id,
                target_id=args.target_id,
                type=args.type,
                strength=args.strength,
            )
            call = stub.Associate(request_a, metadata=metadata)
        else:
            call = stub.Stats(gateway_pb2.StatsRequest(tenant=args.tenant), metadata=metadata)
        reply: Message = await call
        return reply


async def _transfer(args: argparse.Namespace) -> int:
    """export or import, progress on stderr; the exit code."""
    metadata = (("authorization", f"Bearer {args.token}"),)
    async with _channel(args) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        with transfer.progress_bar() as bar:
            if args.cmd == "export":
                request = gateway_pb2.ListRequest(
                    tags=args.tag, types=args.type, include_archived=args.include_archived
                )
                with _opened(args.output, "w") as out:
                    count = await transfer.export(stub, request, out, metadata, bar)
                print(f"exported {count} memories", file=sys.stderr)
                return 0
            with _opened(args.file, "r") as source:
                lines = transfer.read_lines(source)
            done = await transfer.import_lines(stub, lines, args.batch_size, metadata, bar)
    print(
        f"imported {done.stored} memories ({done.duplicates} already there), "
        f"{done.relations} relations ({done.skipped} to missing memories skipped)",
        file=sys.stderr,
    )
    return 0


def _opened(path: str, mode: str) -> AbstractContextManager[IO[str]]:
    """The file, or stdout/stdin for "-" (left open: the interpreter owns them)."""
    if path == "-":
        return nullcontext(sys.stdout if mode == "w" else sys.stdin)
    return open(path, mode, encoding="utf-8")


def _run_transfer(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_transfer(args))
    except grpc.aio.AioRpcError as err:
        print(f"{err.code().name}: {err.details()}", file=sys.stderr)
    except (OSError, ValueError, transfer.ImportFailed) as err:
        print(f"{args.cmd}: {err}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd == "consolidate" and args.wait and (args.dry_run or args.mode == "status"):
        parser.error(
            "--wait follows a run: not with --dry-run (its report comes at once) or status"
        )
    args.ok = True
    try:
        args.credentials = flag_credentials(args)
    except ValueError as err:  # a TlsError too: it names the flag
        parser.error(str(err))
    if args.cmd in ("export", "import"):
        return _run_transfer(args)
    build = {"store": store_request, "recall": recall_request}.get(args.cmd)
    if build is not None:
        try:
            args.built = build(args)
        except ValueError as err:
            parser.error(str(err))
    try:
        reply = asyncio.run(_run(args))
    except grpc.aio.AioRpcError as err:
        print(f"{err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    text = json.dumps(json_format.MessageToDict(reply), indent=2)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the reader stopped early (`| head`): not a failure here
        # stdout now goes nowhere, so the interpreter's last flush does not fail either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if args.ok else 1


if __name__ == "__main__":
    sys.exit(main())
