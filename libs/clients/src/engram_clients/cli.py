"""`engram`: a command line for the public API, on the Python SDK (engram_client)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engram_client import Engram, EngramError
from engram_clients import transfer
from engram_clients.cli_commands import COMMANDS, memory_fields, quiet_stdout, recall_fields

_STORES = ("vector", "lexical", "graph")
_PASSES = ("decay", "associate", "cluster", "forget")
_MODES = ("hybrid", "vector", "bm25", "graph", "hybrid_graph")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _connection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        "--addr",
        dest="address",
        help="the gateway, host:port ($ENGRAM_ADDRESS; default 127.0.0.1:50051, `make run`)",
    )
    p.add_argument("--token", help="bearer token ($ENGRAM_TOKEN; default make run's dev-token)")
    p.add_argument("--timeout", type=float, help="seconds per call ($ENGRAM_TIMEOUT; 30)")
    t = p.add_argument_group("TLS", "--ca, --cert and --key imply --tls")
    t.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help="speak TLS; without --ca, trust the system's CAs ($ENGRAM_TLS=1)",
    )
    t.add_argument("--ca", metavar="FILE", help="PEM CA bundle of the server ($ENGRAM_CA)")
    t.add_argument("--cert", metavar="FILE", help="PEM client certificate for mTLS ($ENGRAM_CERT)")
    t.add_argument("--key", metavar="FILE", help="PEM private key of --cert ($ENGRAM_KEY)")
    t.add_argument(
        "--server-name",
        help="name the server's certificate is checked against, if not the host "
        "($ENGRAM_SERVER_NAME)",
    )


def _memory_flags(s: argparse.ArgumentParser, content_help: str) -> None:
    s.add_argument("--type", default="")
    s.add_argument("--tag", action="append", default=[])
    s.add_argument("--importance", type=float)
    s.add_argument(
        "--memory",
        type=_json_object,
        default={},
        metavar="JSON",
        help='more MemoryInput fields, e.g. \'{"metadata": {"ticket": "OPS-12"}, '
        '"timestamp": "2024-05-08T13:56:00Z"}\'' + content_help,
    )


def _filter_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", action="append", default=[], help="only memories with this tag")
    p.add_argument("--type", action="append", default=[], help="only memories of this type")


def _recall_parser(sub: Any) -> None:
    r = sub.add_parser(
        "recall",
        help="recall (hybrid unless --mode says otherwise)",
        description="Recall memories. The flags set the common RecallRequest fields; "
        "--request sets any other, as JSON with the proto's field names.",
    )
    r.add_argument("query", help='the question; "" or "*" lists trending memories')
    r.add_argument("--limit", type=int, help="results (default 5)")
    _filter_flags(r)
    r.add_argument("--tag-mode", choices=("any", "all"), help="with several --tag")
    r.add_argument("--exclude-tag", action="append", default=[])
    r.add_argument("--mode", choices=_MODES, help="retrieval streams (default hybrid)")
    r.add_argument(
        "--time", default="", help='a window: "last 7 days", "2024-01 to 2024-03", "after May 3"'
    )
    r.add_argument("--token-budget", type=int, default=0, help="pack results into `context`")
    r.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None)
    r.add_argument(
        "--profile",
        default="",
        help="default or conversation (chat turns); unset: the tenant's or the gateway's",
    )
    r.add_argument("--min-sequence", type=int, default=0)
    r.add_argument(
        "--request",
        type=_json_object,
        default={},
        metavar="JSON",
        help='more fields, e.g. \'{"expansion": {"relations": true}, "limit": 20}\'',
    )


def _memory_parsers(sub: Any) -> None:
    s = sub.add_parser("store", help="store one memory")
    s.add_argument("content", nargs="?", help="the text (or `content` in --memory)")
    _memory_flags(s, "")
    u = sub.add_parser("update", help="change the given fields of a memory (the rest stay)")
    u.add_argument("id")
    u.add_argument("--content")
    _memory_flags(u, "; --tag replaces the tags")
    _recall_parser(sub)
    for name in ("get", "delete"):
        sub.add_parser(name, help=f"{name} by id").add_argument("id")
    rel = sub.add_parser("related", help="memories reachable over relations")
    rel.add_argument("id")
    rel.add_argument("--depth", type=int, help="1..3 (default 1)")
    rel.add_argument("--limit", type=int, help="1..100 (default 20)")
    a = sub.add_parser("associate", help="relate two memories")
    a.add_argument("source_id")
    a.add_argument("target_id")
    a.add_argument("--type", default="RELATES_TO")
    a.add_argument("--strength", type=float, default=0.5)
    t = sub.add_parser("stats", help="counts per store, dead letters and the watermark")
    t.add_argument("--tenant", default="", help="another tenant (a token of tenant '*')")


def _feed_parsers(sub: Any) -> None:
    li = sub.add_parser("list", help="the tenant's memories, one JSON line each")
    _filter_flags(li)
    li.add_argument("--tag-mode", choices=("any", "all"), help="with several --tag")
    li.add_argument("--include-archived", action="store_true")
    li.add_argument("--page-size", type=int, default=0, help="memories per page, 1..1000")
    li.add_argument("--cursor", default="", help="start after this (a page's cursor)")
    li.add_argument("--limit", type=int, default=0, help="stop after this many")
    f = sub.add_parser(
        "subscribe", help="follow the tenant's changes, a line per event, until Ctrl-C"
    )
    _filter_flags(f)
    f.add_argument(
        "--from-sequence",
        type=int,
        metavar="N",
        help="first replay the log's events from sequence N on (1: all), then go on live; "
        "to resume, the last sequence printed plus one (default: only new events)",
    )
    f.add_argument("--json", action="store_true", help="each event as a JSON line")
    e = sub.add_parser(
        "export", help="the tenant's memories and their relations as JSONL (stdout or -o)"
    )
    _filter_flags(e)
    e.add_argument("--include-archived", action="store_true")
    e.add_argument("-o", "--output", default="-", help="a file (default stdout)")
    i = sub.add_parser("import", help="store an export's memories and relations (re-runnable)")
    i.add_argument("file", help="a file `engram export` wrote ('-' = stdin)")
    i.add_argument("--batch-size", type=int, default=100, help="memories per StoreBatch")


def _admin_parsers(sub: Any) -> None:
    y = sub.add_parser("sync", help="check the stores against the log and repair them (admin)")
    y.add_argument("--store", action="append", choices=_STORES, default=[])
    y.add_argument("--dry-run", action="store_true")
    y.add_argument("--tenant", default="")
    b = sub.add_parser(
        "rebuild", help="rebuild a store from the log, or show rebuilds and syncs (cluster admin)"
    )
    b.add_argument("store", choices=(*_STORES, "status"))
    b.add_argument("--embedding-model", default="")
    b.add_argument("--tenant", default="", help="status: also this tenant's syncs")
    d = sub.add_parser(
        "dead-letters", help="list or replay the events the workers could not apply (admin)"
    )
    letters = d.add_subparsers(dest="action", required=True)
    dl = letters.add_parser("list", help="the dead letters, oldest first")
    dl.add_argument("--page-size", type=int, default=100, help="letters per call, 1..1000")
    dl.add_argument("--after", type=int, default=0, help="only letters after this sequence")
    dr = letters.add_parser(
        "replay", help="republish dead letters to their original subject, then delete them"
    )
    dr.add_argument(
        "--sequence", type=int, action="append", default=[], help="one letter (default: all)"
    )
    for parser in (dl, dr):
        parser.add_argument("--tenant", default="", help="another tenant (a token of tenant '*')")
    x = sub.add_parser(
        "delete-tenant", help="erase a tenant everywhere, or count what would go (cluster admin)"
    )
    x.add_argument("tenant")
    x.add_argument("--confirm", default="", metavar="TENANT", help="the tenant's name again")
    x.add_argument("--dry-run", action="store_true", help="count, change nothing")
    x.add_argument("--wait", action="store_true", help="until every store has applied it")
    x.add_argument("--poll", type=float, default=1.0, help="seconds between two looks (--wait)")
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engram",
        description="Talk to an Engram gateway. Failed calls print their status code and "
        "the request field the server named, and exit 1.",
    )
    _connection_flags(p)
    sub = p.add_subparsers(dest="cmd", required=True)
    _memory_parsers(sub)
    _feed_parsers(sub)
    _admin_parsers(sub)
    return p


def _connect(args: argparse.Namespace) -> Engram:
    """The SDK client: each setting from its flag, else its ENGRAM_* variable, else make
    run's stack. A ValueError names the flag."""
    if (args.cert is None) != (args.key is None):
        raise ValueError("--cert and --key go together")
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path is not None:
            try:
                open(path, "rb").close()
            except OSError as err:
                raise ValueError(f"{flag}: cannot read {path} ({err.strerror})") from err
    return Engram(
        args.address,
        args.token,
        tls=args.tls,
        ca=args.ca,
        cert=args.cert,
        key=args.key,
        server_name=args.server_name,
        timeout=args.timeout,
    )


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Flags that parse but do not go together, and the fields the JSON flags give."""
    if args.cmd == "consolidate" and args.wait and (args.dry_run or args.mode == "status"):
        parser.error(
            "--wait follows a run: not with --dry-run (its report comes at once) or status"
        )
    if args.cmd == "delete-tenant" and not (args.dry_run or args.confirm):
        parser.error("delete-tenant: --confirm TENANT (its name again), or --dry-run")
    try:
        if args.cmd in ("store", "update"):
            args.fields = memory_fields(args)
            if args.cmd == "store" and not args.fields.get("content"):
                raise ValueError("content: give it as the argument or as `content` in --memory")
        elif args.cmd == "recall":
            args.fields = recall_fields(args)
    except ValueError as err:
        parser.error(str(err))


def _failed(err: EngramError) -> str:
    field = f" (field: {err.field})" if err.field else ""
    return f"{err.code.name}: {err.message}{field}"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    try:
        engram = _connect(args)
    except (ValueError, OSError) as err:  # a bad ENGRAM_CA, ENGRAM_CERT or ENGRAM_KEY too
        parser.error(str(err))
    try:
        with engram:
            return COMMANDS[args.cmd](engram, args)
    except EngramError as err:
        print(_failed(err), file=sys.stderr)
    except (OSError, ValueError, transfer.ImportFailed) as err:
        if isinstance(err, BrokenPipeError):  # the reader stopped early (`| head`): no failure
            quiet_stdout()
            return 0
        print(f"{args.cmd}: {err}", file=sys.stderr)
    except KeyboardInterrupt:  # how a subscription (or a long export) is meant to end
        return 0 if args.cmd == "subscribe" else 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
