"""The tools in process, through the MCP SDK's client, with no gateway behind them."""

from __future__ import annotations

import socket

from mcp import Client
from mcp.types import TextContent

from engram_client import Config
from engram_mcp import render
from engram_mcp.gateway import Gateway
from engram_mcp.server import build


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_an_unreachable_gateway_is_a_tool_error_not_a_crash() -> None:
    gateway = Gateway(Config(f"127.0.0.1:{_closed_port()}", "t", timeout_s=2.0))
    async with Client(build(gateway)) as client:
        result = await client.call_tool("memory_stats", {})
    await gateway.close()
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    [block] = result.content
    assert isinstance(block, TextContent)
    assert block.text.startswith(result.structured_content["code"] + ": ")


def _scored(id: str, content: str) -> dict[str, object]:
    memory = {"id": id, "content": content, "type": "Memory", "tags": ["t"], "timestamp": ""}
    return {"score": 0.5, "memory": memory}


def test_recall_text_is_the_packed_context_with_the_ids_to_act_on() -> None:
    results = [_scored("id-1", "first"), _scored("id-2", "second")]
    assert render.recall_text(results, "- first\n- second") == (
        "- first\n- second\n(ids, best first: id-1, id-2)"
    )
    assert render.recall_text(results, "").splitlines() == [
        "0.50 id-1 (Memory) [t]: first",
        "0.50 id-2 (Memory) [t]: second",
    ]
    assert render.recall_text([], "") == "No memories matched."
