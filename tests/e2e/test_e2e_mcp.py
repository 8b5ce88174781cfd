"""The MCP server (`python -m engram_mcp` on stdio) driven by the MCP SDK's own client
against the embedded stack."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from engram_testing.devstack import DEV_TOKEN, DevStack

TOOLS = {
    "store_memory", "recall_memory", "get_memory", "update_memory", "delete_memory",
    "associate_memories", "related_memories", "memory_stats",
}  # fmt: skip


@asynccontextmanager
async def engram_mcp(stack: DevStack) -> AsyncIterator[Client]:
    env = {"ENGRAM_ADDRESS": stack.gateway_address, "ENGRAM_TOKEN": DEV_TOKEN}
    params = StdioServerParameters(command=sys.executable, args=["-m", "engram_mcp"], env=env)
    async with Client(params) as client:
        yield client


def text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content


async def test_lists_every_tool_with_typed_schemas(stack: DevStack) -> None:
    async with engram_mcp(stack) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    store = tools["store_memory"]
    assert store.input_schema["required"] == ["content"]
    assert store.input_schema["properties"]["importance"]["anyOf"][0]["maximum"] == 1
    assert "token" not in str(
        tools["recall_memory"].input_schema["properties"].keys() - {"token_budget"}
    )
    for tool in tools.values():
        assert len(tool.description or "") > 40, tool.name
        assert tool.output_schema is not None, tool.name
        # who the server is to the gateway is the host's to set, never the model's
        assert not {"tenant", "token", "address"} & set(tool.input_schema["properties"])
    assert "RELATES_TO" in str(tools["associate_memories"].input_schema)


async def test_store_then_recall_get_update_delete(stack: DevStack) -> None:
    tag = f"mcp-{uuid.uuid4().hex[:8]}"
    fact = "Quentin prefers tabs over spaces in every Go repository he maintains"
    async with engram_mcp(stack) as client:
        stored = await call(client, "store_memory", content=fact, tags=[tag], importance=0.8)
        recalled = await client.call_tool(
            "recall_memory", {"query": "Quentin indentation preference", "tags": [tag]}
        )
        assert not recalled.is_error, text(recalled)
        assert "Quentin prefers tabs" in text(recalled)
        assert stored["id"] in text(recalled)
        assert recalled.structured_content is not None
        ids = [r["memory"]["id"] for r in recalled.structured_content["results"]]
        assert ids == [stored["id"]]

        got = await call(client, "get_memory", id=stored["id"])
        assert (got["content"], got["importance"]) == (fact, 0.8)
        assert tag in got["tags"]  # beside the entity tags ingest adds

        await call(client, "update_memory", id=stored["id"], importance=0.3, tags=[tag, "style"])
        got = await call(client, "get_memory", id=stored["id"])
        assert (got["content"], got["importance"]) == (fact, 0.3)
        assert {tag, "style"} <= set(got["tags"])

        await call(client, "delete_memory", id=stored["id"])
        gone = await client.call_tool("get_memory", {"id": stored["id"]})
        assert gone.is_error
        assert "NOT_FOUND" in text(gone)
        again = await call(client, "recall_memory", query="Quentin tabs", tags=[tag])
        assert again["results"] == []


async def test_associate_then_related_and_stats(stack: DevStack) -> None:
    tag = f"mcp-{uuid.uuid4().hex[:8]}"
    async with engram_mcp(stack) as client:
        decision = await call(
            client, "store_memory", content="We chose Postgres for the ledger", tags=[tag]
        )
        outcome = await call(
            client, "store_memory", content="Ledger queries got 3x faster", tags=[tag]
        )
        await call(
            client, "associate_memories",
            source_id=decision["id"], target_id=outcome["id"], type="LEADS_TO", strength=0.9,
        )  # fmt: skip
        result = await client.call_tool("related_memories", {"id": decision["id"]})
        assert not result.is_error, text(result)
        assert result.structured_content is not None
        related = result.structured_content["related"]
        assert [(r["memory"]["id"], r["type"]) for r in related] == [(outcome["id"], "LEADS_TO")]
        assert "LEADS_TO" in text(result)
        assert "3x faster" in text(result)

        stats = await call(client, "memory_stats")
    assert stats["tenant"] == "default"
    assert stats["counts"]["vector"] >= 2
    assert stats["watermark"] >= outcome["sequence"]


async def test_refusals_are_tool_errors_naming_the_field(stack: DevStack) -> None:
    async with engram_mcp(stack) as client:
        by_gateway = await client.call_tool("get_memory", {"id": "not-a-uuid"})
        by_schema = await client.call_tool("store_memory", {"content": "x", "importance": 7})
        empty = await client.call_tool("update_memory", {"id": str(uuid.uuid4())})
    assert by_gateway.is_error
    assert by_gateway.structured_content is not None
    assert by_gateway.structured_content["code"] == "INVALID_ARGUMENT"
    assert by_gateway.structured_content["field"] == "id"
    assert "(field: id)" in text(by_gateway)
    assert by_schema.is_error
    assert "importance" in text(by_schema)
    assert empty.is_error
    assert "nothing to change" in text(empty)


async def test_recall_text_fits_the_token_budget(stack: DevStack) -> None:
    tag = f"mcp-{uuid.uuid4().hex[:8]}"
    async with engram_mcp(stack) as client:
        for i in range(6):
            await call(
                client, "store_memory", tags=[tag],
                content=f"Build note {i}: the release train for service {i} leaves on Thursday "
                "after the integration suite passes on the staging cluster",
            )  # fmt: skip
        small = await client.call_tool(
            "recall_memory", {"query": "release train", "tags": [tag], "token_budget": 40}
        )
        listed = await client.call_tool(
            "recall_memory", {"query": "release train", "tags": [tag], "token_budget": 0}
        )
    assert small.structured_content is not None
    assert listed.structured_content is not None
    assert small.structured_content["context"]
    assert len(text(small)) < len(text(listed))
    assert text(listed).count("Build note") == 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _wait_listening(port: int, server: asyncio.subprocess.Process) -> None:
    for _ in range(300):
        assert server.returncode is None, "engram-mcp --http exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("engram-mcp --http never listened")


async def test_streamable_http_serves_the_same_tools(stack: DevStack) -> None:
    port = _free_port()
    env = dict(os.environ, ENGRAM_ADDRESS=stack.gateway_address, ENGRAM_TOKEN=DEV_TOKEN)
    args = ["-m", "engram_mcp", "--http", "--port", str(port)]
    server = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await _wait_listening(port, server)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            stats = await call(client, "memory_stats")
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)
    assert names == TOOLS
    assert stats["tenant"] == "default"
