"""gRPC servicer for engram.gateway.v1.AdminService: the admin scope, the tenant rule (a
tenant admin acts on its tenant; what spans tenants needs a cluster-admin token), then the
admin service. Catalog errors become status codes in the platform interceptor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from engram.gateway.v1 import admin_pb2, admin_pb2_grpc
from engram_core.errors import Unavailable
from engram_gateway.admin_mapping import (
    consolidation_to_proto,
    dead_letters_to_proto,
    deletion_status_to_proto,
    deletion_to_proto,
    maintenance_to_proto,
    passes_from_mode,
    rebuild_from_proto,
    replay_to_proto,
    status_to_proto,
    stores_from_proto,
    sync_to_proto,
)
from engram_gateway.auth import Authenticator, Principal, Scope, require_cluster, target_tenant
from engram_gateway.service import Deadline, TenantRateLimit
from engram_gateway.service.admin import Admin
from engram_gateway.service.dead_letters import DeadLetters
from engram_gateway.service.tenants import TenantEraser

if TYPE_CHECKING:
    import grpc

    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]

ADMIN_SERVICE_NAME: str = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
_MARGIN_S = 0.05  # answer before the caller gives up, as MemoryService does
# The subject token a rebuild request travels on (a request subject names a tenant; the
# worker records rebuilds across tenants whatever it names).
REBUILD_SUBJECT_TENANT = "_all"


class AdminHandlers(admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        admin: Admin,
        auth: Authenticator,
        rate_limit: TenantRateLimit,
        default_deadline_s: float,
        dead_letters: DeadLetters | None = None,
        tenants: TenantEraser | None = None,
    ) -> None:
        self._admin = admin
        self._auth = auth
        self._rate_limit = rate_limit
        self._default_deadline = default_deadline_s
        self._dead_letters = dead_letters
        self._tenants = tenants

    async def _principal(self, context: Context) -> Principal:
        principal = self._auth.authorize(
            context.invocation_metadata() or (), Scope.ADMIN, any_tenant=True
        )
        await self._rate_limit.admit(principal.tenant)
        return principal

    async def _tenant(self, context: Context, requested: str) -> str:
        return target_tenant(await self._principal(context), requested)

    def _letters(self) -> DeadLetters:
        if self._dead_letters is None:
            raise Unavailable("dead letters are not served here (no log)")
        return self._dead_letters

    def _deadline(self, context: Context) -> Deadline:
        remaining = context.time_remaining()
        if remaining is None:
            return Deadline.within(self._default_deadline)
        return Deadline.within(remaining - min(_MARGIN_S, 0.1 * remaining))

    async def Consolidate(  # noqa: N802 (generated servicer names)
        self, request: admin_pb2.ConsolidateRequest, context: Context
    ) -> admin_pb2.ConsolidateResponse:
        tenant = await self._tenant(context, request.tenant)
        passes = passes_from_mode(request.mode)
        out = await self._admin.consolidate(
            tenant, passes, request.dry_run, self._deadline(context)
        )
        return consolidation_to_proto(out)

    async def ConsolidationStatus(  # noqa: N802
        self, request: admin_pb2.ConsolidationStatusRequest, context: Context
    ) -> admin_pb2.ConsolidationStatusResponse:
        tenant = await self._tenant(context, request.tenant)
        deadline = self._deadline(context)
        statuses = await self._admin.status(tenant, deadline)
        return status_to_proto(tenant, statuses, await self._admin.syncs(tenant, deadline))

    async def Sync(  # noqa: N802
        self, request: admin_pb2.SyncRequest, context: Context
    ) -> admin_pb2.SyncResponse:
        tenant = await self._tenant(context, request.tenant)
        stores = stores_from_proto(request.stores)
        out = await self._admin.sync(tenant, stores, request.dry_run, self._deadline(context))
        return sync_to_proto(out)

    async def Rebuild(  # noqa: N802
        self, request: admin_pb2.RebuildRequest, context: Context
    ) -> admin_pb2.RebuildResponse:
        require_cluster(await self._principal(context), "Rebuild")
        store, model = rebuild_from_proto(request)
        run_id = await self._admin.rebuild(
            REBUILD_SUBJECT_TENANT, store, model, self._deadline(context)
        )
        return admin_pb2.RebuildResponse(run_id=run_id)

    async def RebuildStatus(  # noqa: N802
        self, request: admin_pb2.RebuildStatusRequest, context: Context
    ) -> admin_pb2.RebuildStatusResponse:
        principal = await self._principal(context)
        require_cluster(principal, "RebuildStatus")
        tenant = target_tenant(principal, request.tenant) if request.tenant.strip() else ""
        out = await self._admin.maintenance(tenant, self._deadline(context))
        return maintenance_to_proto(tenant, out)

    async def ListDeadLetters(  # noqa: N802
        self, request: admin_pb2.ListDeadLettersRequest, context: Context
    ) -> admin_pb2.ListDeadLettersResponse:
        tenant = await self._tenant(context, request.tenant)
        page = await self._letters().listing(tenant, request.after, request.page_size)
        return dead_letters_to_proto(tenant, page)

    async def ReplayDeadLetters(  # noqa: N802
        self, request: admin_pb2.ReplayDeadLettersRequest, context: Context
    ) -> admin_pb2.ReplayDeadLettersResponse:
        tenant = await self._tenant(context, request.tenant)
        out = await self._letters().replay(tenant, list(request.sequences), self._deadline(context))
        return replay_to_proto(tenant, out)

    async def _erasing(
        self, context: Context, requested: str, what: str
    ) -> tuple[str, TenantEraser]:
        principal = await self._principal(context)
        require_cluster(principal, what)
        tenant = target_tenant(principal, requested)
        if self._tenants is None:
            raise Unavailable("tenant deletion is not served here (no log)")
        return tenant, self._tenants

    async def DeleteTenant(  # noqa: N802
        self, request: admin_pb2.DeleteTenantRequest, context: Context
    ) -> admin_pb2.DeleteTenantResponse:
        tenant, tenants = await self._erasing(context, request.tenant, "DeleteTenant")
        deadline = self._deadline(context)
        out = await tenants.delete(tenant, request.confirm, request.dry_run, deadline)
        return deletion_to_proto(out)

    async def DeleteTenantStatus(  # noqa: N802
        self, request: admin_pb2.DeleteTenantStatusRequest, context: Context
    ) -> admin_pb2.DeleteTenantStatusResponse:
        tenant, tenants = await self._erasing(context, request.tenant, "DeleteTenantStatus")
        out = await tenants.status(tenant, request.sequence, self._deadline(context))
        return deletion_status_to_proto(out)
