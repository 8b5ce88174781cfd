"""The MCP tools over Engram's MemoryService. The tenant is the token's, set by whoever runs
the server; no tool takes a token, tenant or address."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from engram_client import EngramError, InvalidArgument
from engram_mcp import render
from engram_mcp.gateway import Gateway

INSTRUCTIONS = (
    "Long-term memory shared across sessions and agents. Before answering from scratch, "
    "recall_memory what you may already know; store_memory facts, decisions, preferences and "
    "outcomes worth keeping (one self-contained statement each, with tags). Ids come from "
    "store_memory and recall_memory."
)

RelationType = Literal[
    "RELATES_TO", "LEADS_TO", "OCCURRED_BEFORE", "PREFERS_OVER", "EXEMPLIFIES", "CONTRADICTS",
    "REINFORCES", "INVALIDATED_BY", "EVOLVED_INTO", "DERIVED_FROM", "PART_OF",
]  # fmt: skip

Id = Annotated[str, Field(description="A memory id (UUID) from store_memory or recall_memory.")]
Tags = Annotated[
    list[str] | None,
    Field(description='Labels, lower-case, ":" for hierarchy, e.g. ["project:atlas", "decision"].'),
]
Importance = Annotated[
    float | None, Field(ge=0, le=1, description="How much it matters, 0..1 (default 0.5).")
]
Confidence = Annotated[
    float | None, Field(ge=0, le=1, description="How sure the fact is, 0..1 (default 0.9).")
]
MemoryType = Annotated[
    str | None,
    Field(description="Kind of memory: Memory (default), Decision, Preference, Pattern, Insight…"),
]
Metadata = Annotated[
    dict[str, Any] | None, Field(description="Free-form JSON object stored with the memory.")
]


class Written(BaseModel):
    id: str = Field(description="The memory's id.")
    sequence: int = Field(description="Log position of the write.")


class Associated(BaseModel):
    sequence: int


class MemoryOut(BaseModel):
    id: str
    content: str
    type: str
    tags: list[str]
    importance: float
    confidence: float
    metadata: dict[str, Any]
    timestamp: str
    updated_at: str
    archived: bool
    entities: list[str]


class Scored(BaseModel):
    score: float
    memory: MemoryOut


class Recalled(BaseModel):
    results: list[Scored]
    context: str = Field(description="The results packed as text within token_budget.")
    degraded: list[str] = Field(description="Retrieval streams that failed; results may be thin.")


class RelatedOut(BaseModel):
    type: str
    strength: float
    depth: int
    memory: MemoryOut


class RelatedList(BaseModel):
    related: list[RelatedOut]


class Stats(BaseModel):
    tenant: str
    counts: dict[str, int]
    watermark: int
    last_sequence: int
    dead_letters: int


def _result(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


async def _answer(
    call: Awaitable[Any], text: Callable[[Any], str], wrap: str = ""
) -> CallToolResult:
    """The gateway's reply as text plus structured content, or its refusal as a tool error
    naming the field, so the model can correct that argument."""
    try:
        value = await call
    except EngramError as err:
        return _refused(err)
    return _result(text(value), {wrap: value} if wrap else value)


def _refused(err: EngramError) -> CallToolResult:
    structured = {"code": err.code.name, "message": err.message, "field": err.field}
    named = f" (field: {err.field})" if err.field else ""
    content = [TextContent(type="text", text=f"{err.code.name}: {err.message}{named}")]
    return CallToolResult(content=content, structured_content=structured, is_error=True)


def _written(verb: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f"{verb} {r['id']}"


def _write_tools(mcp: MCPServer[Any], gw: Gateway) -> None:
    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def store_memory(
        content: Annotated[str, Field(description="The memory: one self-contained statement.")],
        tags: Tags = None,
        type: MemoryType = None,
        importance: Importance = None,
        confidence: Confidence = None,
        metadata: Metadata = None,
    ) -> Annotated[CallToolResult, Written]:
        """Save something worth remembering across sessions: a fact, decision, preference,
        outcome or lesson. Write it so it makes sense alone later (who, what, why). Returns
        the new memory's id; recall_memory finds it right away."""
        call = gw.store(
            content, tags=tags, type=type, importance=importance, confidence=confidence,
            metadata=metadata,
        )  # fmt: skip
        return await _answer(call, _written("Stored"))

    @mcp.tool(annotations=ToolAnnotations(idempotent_hint=True))
    async def update_memory(
        id: Id,
        content: Annotated[str | None, Field(description="New text; omit to keep.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags (replace all).")] = None,
        type: MemoryType = None,
        importance: Importance = None,
        confidence: Confidence = None,
        metadata: Metadata = None,
    ) -> Annotated[CallToolResult, Written]:
        """Change a stored memory when a fact was wrong or changed; only the fields given are
        replaced (tags replace the whole list). To record that a fact was superseded but keep
        its history, store the new one and associate_memories with INVALIDATED_BY instead."""
        fields = {
            "content": content, "tags": tags, "type": type, "importance": importance,
            "confidence": confidence, "metadata": metadata,
        }  # fmt: skip
        if all(value is None for value in fields.values()):
            reason = "nothing to change: give at least one of " + ", ".join(fields)
            return _refused(InvalidArgument(reason))
        return await _answer(gw.update(id, **fields), _written("Updated"))


def _delete_and_link_tools(mcp: MCPServer[Any], gw: Gateway) -> None:
    @mcp.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    async def delete_memory(id: Id) -> Annotated[CallToolResult, Written]:
        """Delete a memory for good: when it is wrong, private or asked to be forgotten."""
        return await _answer(gw.delete(id), _written("Deleted"))

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    async def associate_memories(
        source_id: Annotated[str, Field(description="The memory the relation starts from.")],
        target_id: Annotated[str, Field(description="The memory it points to.")],
        type: Annotated[RelationType, Field(description="How source relates to target.")],
        strength: Annotated[
            float, Field(ge=0, le=1, description="How strong the link is, 0..1 (0 = default 0.5).")
        ] = 0.0,
    ) -> Annotated[CallToolResult, Associated]:
        """Link two memories with a typed, directed relation (source -type-> target): e.g.
        a decision LEADS_TO an outcome, an old fact INVALIDATED_BY a new one, a step PART_OF a
        plan. Related memories surface together in related_memories and recall."""
        call = gw.associate(source_id, target_id, type, strength)
        return await _answer(call, lambda _: f"Linked {source_id} -{type}-> {target_id}")


def _read_tools(mcp: MCPServer[Any], gw: Gateway) -> None:
    read_only = ToolAnnotations(read_only_hint=True)

    @mcp.tool(annotations=read_only)
    async def recall_memory(
        query: Annotated[str, Field(description="What you want to know, in natural language.")],
        limit: Annotated[int, Field(ge=1, le=100, description="Most memories to return.")] = 10,
        tags: Annotated[
            list[str] | None, Field(description="Only memories with any of these tags.")
        ] = None,
        all_tags: Annotated[bool, Field(description="Require every tag, not any.")] = False,
        types: Annotated[list[str] | None, Field(description="Only these memory types.")] = None,
        time_query: Annotated[
            str | None, Field(description='A time window, e.g. "last 7 days", "in March 2025".')
        ] = None,
        token_budget: Annotated[
            int,
            Field(ge=0, le=20000, description="Pack the answer into ~this many tokens; 0 = list."),
        ] = 1000,
    ) -> Annotated[CallToolResult, Recalled]:
        """Search long-term memory (meaning, keywords and related entities together) and get
        the best matches, best first, as compact text within token_budget. Use it before
        answering anything that past sessions, the user's preferences or earlier decisions
        may inform. Sees every memory this server stored, including a moment ago."""
        call = gw.recall(
            query, limit=limit, tags=tags, tag_mode="all" if all_tags else "any", types=types,
            time_query=time_query, token_budget=token_budget,
        )  # fmt: skip
        return await _answer(call, lambda r: render.recall_text(r["results"], r["context"]))

    @mcp.tool(annotations=read_only)
    async def get_memory(id: Id) -> Annotated[CallToolResult, MemoryOut]:
        """Read one memory by id, with every field (tags, metadata, times, entities)."""
        return await _answer(gw.get(id), render.as_json)

    @mcp.tool(annotations=read_only)
    async def related_memories(
        id: Id,
        depth: Annotated[int, Field(ge=1, le=3, description="Hops to follow.")] = 1,
        types: Annotated[
            list[RelationType] | None, Field(description="Relation types to follow; omit = all.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most memories to return.")] = 20,
    ) -> Annotated[CallToolResult, RelatedList]:
        """Memories linked to one memory by relations (from associate_memories or found by
        the system), with the relation type of the first hop: to follow a decision to its
        outcome, find what superseded a fact, or gather the parts of a plan."""
        call = gw.related(id, depth=depth, types=types, limit=limit)
        return await _answer(call, render.related_text, wrap="related")

    @mcp.tool(annotations=read_only)
    async def memory_stats() -> Annotated[CallToolResult, Stats]:
        """How many memories this tenant has in each store, and how far indexing has got
        (watermark vs last_sequence; dead_letters = writes a store refused)."""
        return await _answer(gw.stats(), render.as_json)


def build(gw: Gateway) -> MCPServer[Any]:
    mcp: MCPServer[Any] = MCPServer("engram", instructions=INSTRUCTIONS)
    _write_tools(mcp, gw)
    _delete_and_link_tools(mcp, gw)
    _read_tools(mcp, gw)
    return mcp
