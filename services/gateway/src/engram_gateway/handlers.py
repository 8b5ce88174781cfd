"""gRPC servicer for engram.gateway.v1.MemoryService: authorize, map, call the service, map back.

Catalog errors raised here or below become status codes in the platform interceptor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeAlias

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core import validation as v
from engram_core.errors import InvalidArgument, Unavailable
from engram_gateway.auth import ALL_TENANTS, Authenticator, Scope, target_tenant
from engram_gateway.mapping import (
    event_to_proto,
    feed_query_from_proto,
    list_page_to_proto,
    list_request_from_proto,
    memory_input_from_proto,
    recall_request_from_proto,
    recall_result_to_proto,
    related_to_proto,
    stats_to_proto,
    store_outcome_to_proto,
)
from engram_gateway.service import (
    Deadline,
    Gateway,
    StatsView,
    StoreItem,
    StoreOutcome,
    batch_items,
)
from engram_platform.convert import memory_to_proto, struct_to_dict

if TYPE_CHECKING:
    import grpc

    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]

SERVICE_NAME: str = gateway_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
# The server gives up this much before the caller does, so its own answer (e.g. naming
# the min_sequence that was not reached) arrives instead of the client's bare timeout.
_MARGIN_S = 0.05


class MemoryHandlers(gateway_pb2_grpc.MemoryServiceServicer):
    def __init__(
        self, gateway: Gateway, auth: Authenticator, default_deadline_s: float, max_stream: int
    ) -> None:
        self._writer = gateway.writer
        self._reader = gateway.reader
        self._auth = auth
        self._rate_limit = gateway.rate_limit
        self._write_rate = gateway.write_rate
        self._default_deadline = default_deadline_s
        self._max_stream = max_stream
        self._lister = gateway.lister
        self._feed = gateway.feed
        self._stats = gateway.stats or StatsView(gateway.reader, None, default_deadline_s)

    async def _tenant(self, context: Context, scope: Scope) -> str:
        """The caller's tenant, once its token allows `scope` and its rate limit this call."""
        principal = self._auth.authorize(context.invocation_metadata() or (), scope)
        await self._rate_limit.admit(principal.tenant)
        return principal.tenant

    def _deadline(self, context: Context) -> Deadline:
        remaining = context.time_remaining()  # None: the caller set no deadline
        if remaining is None:
            return Deadline.within(self._default_deadline)
        return Deadline.within(remaining - min(_MARGIN_S, 0.1 * remaining))

    # --- writes -------------------------------------------------------------------------

    async def _store(self, tenant: str, items: list[StoreItem], context: Context) -> StoreOutcome:
        """Store once the tenant's write rate allows every memory of the call."""
        await self._write_rate.admit(tenant, len(items))
        return await self._writer.store(tenant, items, self._deadline(context))

    async def Store(  # noqa: N802 (generated servicer names)
        self, request: gateway_pb2.StoreRequest, context: Context
    ) -> gateway_pb2.StoreResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        item = StoreItem(memory_input_from_proto(request.memory), request.idempotency_key)
        [stored] = (await self._store(tenant, [item], context)).results
        return gateway_pb2.StoreResponse(
            id=stored.id, sequence=stored.sequence, duplicate=stored.duplicate
        )

    async def StoreBatch(  # noqa: N802
        self, request: gateway_pb2.StoreBatchRequest, context: Context
    ) -> gateway_pb2.StoreBatchResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        v.check_batch_size(len(request.memories), "memories", self._writer.limits)
        items = batch_items(
            [memory_input_from_proto(m) for m in request.memories],
            request.idempotency_key,
            list(request.idempotency_keys),
            self._writer.limits,
        )
        out = await self._store(tenant, items, context)
        return store_outcome_to_proto(out)

    async def StoreStream(  # noqa: N802
        self, request_iterator: AsyncIterator[gateway_pb2.StoreRequest], context: Context
    ) -> gateway_pb2.StoreBatchResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        items: list[StoreItem] = []
        async for request in request_iterator:
            if len(items) >= self._max_stream:
                raise InvalidArgument("requests", f"more than {self._max_stream} messages")
            i = len(items)
            items.append(
                StoreItem(
                    memory_input_from_proto(request.memory),
                    request.idempotency_key,
                    path=f"requests[{i}].memory",
                    key_path=f"requests[{i}].idempotency_key",
                )
            )
        if not items:
            raise InvalidArgument("requests", "must not be empty")
        # The deadline is read once the stream has ended: publishing gets what is left.
        out = await self._store(tenant, items, context)
        return store_outcome_to_proto(out)

    async def Update(  # noqa: N802
        self, request: gateway_pb2.UpdateRequest, context: Context
    ) -> gateway_pb2.UpdateResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        mid, seq = await self._writer.update(
            tenant,
            request.id,
            memory_input_from_proto(request.memory),
            list(request.update_mask.paths),
            self._deadline(context),
        )
        return gateway_pb2.UpdateResponse(id=mid, sequence=seq)

    async def Delete(  # noqa: N802
        self, request: gateway_pb2.DeleteRequest, context: Context
    ) -> gateway_pb2.DeleteResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        mid, seq = await self._writer.delete(tenant, request.id, self._deadline(context))
        return gateway_pb2.DeleteResponse(id=mid, sequence=seq)

    async def Associate(  # noqa: N802
        self, request: gateway_pb2.AssociateRequest, context: Context
    ) -> gateway_pb2.AssociateResponse:
        tenant = await self._tenant(context, Scope.WRITE)
        seq = await self._writer.associate(
            tenant,
            request.source_id,
            request.target_id,
            request.type,
            request.strength,
            # Non-finite numbers kept: validation refuses them naming where they are.
            struct_to_dict(request.properties, finite=False)
            if request.HasField("properties")
            else None,
            self._deadline(context),
        )
        return gateway_pb2.AssociateResponse(sequence=seq)

    # --- reads --------------------------------------------------------------------------

    async def Recall(  # noqa: N802
        self, request: gateway_pb2.RecallRequest, context: Context
    ) -> gateway_pb2.RecallResponse:
        tenant = await self._tenant(context, Scope.READ)
        result = await self._reader.recall(
            tenant, recall_request_from_proto(request), self._deadline(context)
        )
        return recall_result_to_proto(result)

    async def Get(  # noqa: N802
        self, request: gateway_pb2.GetRequest, context: Context
    ) -> gateway_pb2.GetResponse:
        tenant = await self._tenant(context, Scope.READ)
        memory = await self._reader.get(
            tenant, request.id, self._deadline(context), request.min_sequence
        )
        return gateway_pb2.GetResponse(memory=memory_to_proto(memory))

    async def List(  # noqa: N802
        self, request: gateway_pb2.ListRequest, context: Context
    ) -> AsyncIterator[gateway_pb2.ListResponse]:
        tenant = await self._tenant(context, Scope.READ)
        if self._lister is None:
            raise Unavailable("List is not served here")
        async for page in self._lister.pages(tenant, list_request_from_proto(request)):
            yield list_page_to_proto(page)

    async def Related(  # noqa: N802
        self, request: gateway_pb2.RelatedRequest, context: Context
    ) -> gateway_pb2.RelatedResponse:
        tenant = await self._tenant(context, Scope.READ)
        items = await self._reader.related(
            tenant,
            request.id,
            request.depth,
            list(request.types),
            request.limit,
            self._deadline(context),
            request.min_sequence,
        )
        return related_to_proto(items)

    async def Stats(  # noqa: N802
        self, request: gateway_pb2.StatsRequest, context: Context
    ) -> gateway_pb2.StatsResponse:
        # A cluster-admin token names the tenant, and alone sees the log's own positions.
        principal = self._auth.authorize(
            context.invocation_metadata() or (), Scope.READ, any_tenant=True
        )
        await self._rate_limit.admit(principal.tenant)
        tenant = target_tenant(principal, request.tenant)
        cluster = principal.tenant == ALL_TENANTS
        return stats_to_proto(await self._stats.stats(tenant, self._deadline(context), cluster))

    # --- change feed --------------------------------------------------------------------

    async def Subscribe(  # noqa: N802
        self, request: gateway_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[gateway_pb2.SubscribeResponse]:
        tenant = await self._tenant(context, Scope.READ)
        query = feed_query_from_proto(request, self._writer.limits)
        if self._feed is None:
            raise Unavailable("this gateway serves no change feed")
        async for event in self._feed.subscribe(tenant, query):
            yield event_to_proto(event)
