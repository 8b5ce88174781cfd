"""The one module that talks to the gateway (over the generated stubs), in plain Python
values, so the tools can move onto the SDK by replacing this file alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_mcp.config import Config

FIELD_KEY = "engram-field"
_SETTLE_POLL_S = 0.05
_MEMORY_FIELDS = ("content", "type", "tags", "importance", "confidence", "metadata")


class GatewayError(Exception):
    """A call the gateway refused: its status name, message and the field it named."""

    # Not a frozen dataclass: raising sets attributes (__traceback__) on the instance.
    def __init__(self, code: str, message: str, field: str = "") -> None:
        super().__init__(code, message, field)
        self.code, self.message, self.field = code, message, field

    def __str__(self) -> str:
        named = f" (field: {self.field})" if self.field else ""
        return f"{self.code}: {self.message}{named}"


def _credentials(config: Config) -> grpc.ChannelCredentials | None:
    if config.tls is None:
        return None
    tls = config.tls
    return grpc.ssl_channel_credentials(tls.ca, tls.key, tls.cert)


def _error(err: grpc.aio.AioRpcError) -> GatewayError:
    field = next((str(v) for k, v in err.trailing_metadata() or () if k == FIELD_KEY), "")
    return GatewayError(err.code().name, err.details() or "", field)


def _struct(values: dict[str, Any] | None) -> struct_pb2.Struct | None:
    if not values:
        return None
    out = struct_pb2.Struct()
    out.update(values)
    return out


def memory_input(**fields: Any) -> common_pb2.MemoryInput:
    """A MemoryInput from the fields given (None = not given)."""
    given = {k: v for k, v in fields.items() if v is not None and k in _MEMORY_FIELDS}
    metadata = _struct(given.pop("metadata", None))
    out = common_pb2.MemoryInput(**given)
    if metadata is not None:
        out.metadata.CopyFrom(metadata)
    return out


def recall_request(
    query: str,
    limit: int,
    tags: Sequence[str],
    all_tags: bool,
    types: Sequence[str],
    time_query: str,
    token_budget: int,
) -> gateway_pb2.RecallRequest:
    mode = common_pb2.TAG_MODE_ALL if all_tags else common_pb2.TAG_MODE_ANY
    return gateway_pb2.RecallRequest(
        query=query,
        limit=limit,
        tags=tags,
        tag_mode=mode,
        types=types,
        time_query=time_query,
        token_budget=token_budget,
    )


def _time(ts: timestamp_pb2.Timestamp) -> str:
    return ts.ToJsonString() if ts.seconds or ts.nanos else ""


def memory_dict(m: common_pb2.Memory) -> dict[str, Any]:
    """The fields of a memory an agent reads (no index internals)."""
    return {
        "id": m.id,
        "content": m.content,
        "type": m.type,
        "tags": list(m.tags),
        "importance": round(m.importance, 3),
        "confidence": round(m.confidence, 3),
        "metadata": json_format.MessageToDict(m.metadata),
        "timestamp": _time(m.timestamp),
        "updated_at": _time(m.updated_at),
        "archived": m.archived,
        "entities": list(m.entities),
    }


class Gateway:
    """MemoryService calls for one token. Remembers the newest sequence this process wrote so
    a recall waits for it (read-your-writes)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._channel: grpc.aio.Channel | None = None
        self._stub: gateway_pb2_grpc.MemoryServiceStub | None = None
        self._written = 0
        self._settled = 0

    def _memory(self) -> gateway_pb2_grpc.MemoryServiceStub:
        # The aio channel binds the running event loop, so it is made on first use.
        if self._stub is None:
            creds = _credentials(self._config)
            addr = self._config.address
            self._channel = (
                grpc.aio.insecure_channel(addr)
                if creds is None
                else grpc.aio.secure_channel(addr, creds)
            )
            self._stub = gateway_pb2_grpc.MemoryServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stub = None

    async def _call(self, rpc: str, request: Any) -> Any:
        metadata = (("authorization", f"Bearer {self._config.token}"),)
        method = getattr(self._memory(), rpc)
        try:
            return await method(request, metadata=metadata, timeout=self._config.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise _error(err) from err

    def _wrote(self, sequence: int) -> None:
        self._written = max(self._written, sequence)

    async def _settle(self) -> None:
        """Wait until the stores applied this process's writes, so a get, update or
        associate of a memory stored a moment ago finds it. Stats' watermark is the
        tenant's own; past the timeout, or without Stats, the call goes ahead and answers
        for itself."""
        target = self._written
        if target <= self._settled:
            return
        give_up = time.monotonic() + self._config.timeout_s
        while time.monotonic() < give_up:
            try:
                reply = await self._call("Stats", gateway_pb2.StatsRequest())
            except GatewayError:  # e.g. a token without read scope: no wait, not a failure
                return
            if reply.watermark >= target:
                self._settled = max(self._settled, target)
                return
            await asyncio.sleep(_SETTLE_POLL_S)

    async def store(self, memory: common_pb2.MemoryInput) -> dict[str, Any]:
        reply = await self._call("Store", gateway_pb2.StoreRequest(memory=memory))
        self._wrote(reply.sequence)
        return {"id": reply.id, "sequence": reply.sequence}

    async def recall(self, request: gateway_pb2.RecallRequest) -> dict[str, Any]:
        request.min_sequence = max(request.min_sequence, self._written)
        reply: gateway_pb2.RecallResponse = await self._call("Recall", request)
        results = [
            {"score": round(r.score, 4), "memory": memory_dict(r.memory)} for r in reply.results
        ]
        return {"results": results, "context": reply.context, "degraded": list(reply.degraded)}

    async def get(self, id: str) -> dict[str, Any]:
        await self._settle()
        reply = await self._call("Get", gateway_pb2.GetRequest(id=id))
        return memory_dict(reply.memory)

    async def update(
        self, id: str, memory: common_pb2.MemoryInput, mask: Sequence[str]
    ) -> dict[str, Any]:
        await self._settle()
        request = gateway_pb2.UpdateRequest(id=id, memory=memory)
        request.update_mask.paths.extend(mask)
        reply = await self._call("Update", request)
        self._wrote(reply.sequence)
        return {"id": reply.id, "sequence": reply.sequence}

    async def delete(self, id: str) -> dict[str, Any]:
        await self._settle()
        reply = await self._call("Delete", gateway_pb2.DeleteRequest(id=id))
        self._wrote(reply.sequence)
        return {"id": reply.id, "sequence": reply.sequence}

    async def associate(
        self, source_id: str, target_id: str, type: str, strength: float
    ) -> dict[str, Any]:
        await self._settle()
        request = gateway_pb2.AssociateRequest(
            source_id=source_id, target_id=target_id, type=type, strength=strength
        )
        reply = await self._call("Associate", request)
        self._wrote(reply.sequence)
        return {"sequence": reply.sequence}

    async def related(
        self, id: str, depth: int, types: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        await self._settle()
        request = gateway_pb2.RelatedRequest(id=id, depth=depth, types=types, limit=limit)
        reply = await self._call("Related", request)
        return [
            {"type": r.type, "strength": round(r.strength, 3), "depth": r.depth}
            | {"memory": memory_dict(r.memory)}
            for r in reply.related
        ]

    async def stats(self) -> dict[str, Any]:
        reply = await self._call("Stats", gateway_pb2.StatsRequest())
        return {
            "tenant": reply.tenant,
            "counts": dict(reply.counts),
            "watermark": reply.watermark,
            "last_sequence": reply.last_sequence,
            "dead_letters": reply.dead_letters,
        }
