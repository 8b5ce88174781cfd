"""engram-mcp: the MCP server, on stdio by default or streamable HTTP with --http."""

from __future__ import annotations

import argparse

from engram_mcp import config
from engram_mcp.gateway import Gateway
from engram_mcp.server import build


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engram-mcp",
        description="Engram memory tools over MCP. The gateway, token and TLS come from "
        "ENGRAM_ADDRESS, ENGRAM_TOKEN, ENGRAM_TLS / ENGRAM_CA / ENGRAM_CERT / ENGRAM_KEY.",
    )
    p.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address")
    p.add_argument("--port", type=int, default=8000, help="HTTP port")
    p.add_argument("--path", default="/mcp", help="HTTP endpoint path")
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        settings = config.from_env()
    except config.ConfigError as err:
        raise SystemExit(f"engram-mcp: {err}") from err
    server = build(Gateway(settings))
    if args.http:
        server.run(
            "streamable-http", host=args.host, port=args.port, streamable_http_path=args.path
        )
    else:
        server.run()


if __name__ == "__main__":
    main()
