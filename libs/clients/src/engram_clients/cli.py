"""`engram`: a small command line for the public API (what grpcurl would do, without grpcurl)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram", description="Talk to an Engram gateway.")
    p.add_argument("--addr", default=os.environ.get("ENGRAM_ADDR", "127.0.0.1:50051"))
    p.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN", "dev-token"))
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("store", help="store one memory")
    s.add_argument("content")
    s.add_argument("--type", default="")
    s.add_argument("--tag", action="append", default=[])
    s.add_argument("--importance", type=float)
    r = sub.add_parser("recall", help="hybrid recall")
    r.add_argument("query")
    r.add_argument("--limit", type=int, default=5)
    r.add_argument("--tag", action="append", default=[])
    r.add_argument("--min-sequence", type=int, default=0)
    for name in ("get", "delete", "related"):
        sub.add_parser(name, help=f"{name} by id").add_argument("id")
    a = sub.add_parser("associate", help="relate two memories")
    a.add_argument("source_id")
    a.add_argument("target_id")
    a.add_argument("--type", default="RELATES_TO")
    a.add_argument("--strength", type=float, default=0.5)
    sub.add_parser("stats", help="counts per store and the watermark")
    y = sub.add_parser("sync", help="check the stores against the log and repair them (admin)")
    y.add_argument("--store", action="append", choices=_STORES, default=[])
    y.add_argument("--dry-run", action="store_true")
    y.add_argument("--tenant", default="")
    b = sub.add_parser(
        "rebuild", help="rebuild a store from the log, or show rebuilds and syncs (admin)"
    )
    b.add_argument("store", choices=(*_STORES, "status"))
    b.add_argument("--embedding-model", default="")
    return p


_STORES = ("vector", "lexical", "graph")


def _admin_call(
    args: argparse.Namespace, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]
) -> Any:
    stub = admin_pb2_grpc.AdminServiceStub(channel)
    store = {n: admin_pb2.Store.Value(f"STORE_{n.upper()}") for n in _STORES}
    if args.cmd == "sync":
        request = admin_pb2.SyncRequest(
            tenant=args.tenant, stores=[store[s] for s in args.store], dry_run=args.dry_run
        )
        return stub.Sync(request, metadata=metadata)
    if args.store == "status":
        return stub.RebuildStatus(admin_pb2.RebuildStatusRequest(), metadata=metadata)
    rebuild = admin_pb2.RebuildRequest(
        store=store[args.store], embedding_model=args.embedding_model
    )
    return stub.Rebuild(rebuild, metadata=metadata)


async def _run(args: argparse.Namespace) -> Message:
    metadata = (("authorization", f"Bearer {args.token}"),)
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        call: Any
        if args.cmd in ("sync", "rebuild"):
            call = _admin_call(args, channel, metadata)
        elif args.cmd == "store":
            memory = common_pb2.MemoryInput(content=args.content, type=args.type, tags=args.tag)
            if args.importance is not None:
                memory.importance = args.importance
            call = stub.Store(gateway_pb2.StoreRequest(memory=memory), metadata=metadata)
        elif args.cmd == "recall":
            request = gateway_pb2.RecallRequest(
                query=args.query, limit=args.limit, tags=args.tag, min_sequence=args.min_sequence
            )
            call = stub.Recall(request, metadata=metadata)
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
            call = stub.Stats(gateway_pb2.StatsRequest(), metadata=metadata)
        reply: Message = await call
        return reply


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        reply = asyncio.run(_run(args))
    except grpc.aio.AioRpcError as err:
        print(f"{err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    print(json.dumps(json_format.MessageToDict(reply), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
