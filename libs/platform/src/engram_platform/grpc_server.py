"""One way to run a gRPC server: health, reflection, error mapping, tracing, RPC metrics,
size limits."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry import metrics, trace
from opentelemetry.trace import StatusCode as SpanStatus

from engram_core.errors import EngramError, InvalidArgument
from engram_platform.decode import Malformed, tolerant
from engram_platform.errors import status_code, trailing_metadata
from engram_platform.gc_tuning import tune_for_serving
from engram_platform.rpc_metrics import duration_histogram, elapsed_ms, rpc_attributes
from engram_platform.settings import ServiceSettings
from engram_platform.telemetry import extract_context
from engram_platform.tls import server_credentials
from engram_platform.workers import sharing_port

log = logging.getLogger(__name__)
Register = Callable[[grpc.aio.Server], None]
if TYPE_CHECKING:
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def _decoded(request: Any, prefix: str = "") -> Any:
    """``request`` as decoded, or InvalidArgument naming the field that did not decode."""
    if isinstance(request, Malformed):
        field = f"{prefix}.{request.field}" if prefix else request.field
        raise InvalidArgument(field, request.reason)
    return request


async def _decoded_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The stream's messages, failing at the first that did not decode (``requests[i]``)."""
    i = 0
    async for request in requests:
        yield _decoded(request, f"requests[{i}]")
        i += 1


# Most messages read past a refusal before it is sent anyway (a client that never stops
# sending is then cut off, as before).
MAX_DRAINED = 10_000


async def _refused_after_drain(
    call: Callable[[AsyncIterator[Any]], Awaitable[Any]], requests: AsyncIterator[Any]
) -> Any:
    """``call`` over the stream; when it refuses the request, the rest of the stream is read
    first. A status sent while the client is still writing reaches grpcio's asyncio client
    as INTERNAL "Internal error from Core" in place of the refusal (grpc/grpc#36066): the
    client must see the field named, whoever's bug it is."""
    stream = aiter(requests)
    try:
        return await call(_decoded_stream(stream))
    except EngramError:
        drained = 0
        async for _ in stream:
            drained += 1
            if drained >= MAX_DRAINED:
                break
        raise


class _Interceptor(grpc.aio.ServerInterceptor):
    """Maps catalog errors to status codes, opens the server span of every RPC and records
    its duration (`engram_platform.rpc_metrics`).

    Requests that do not decode are INVALID_ARGUMENT naming the field (`engram_platform.decode`)
    rather than the UNKNOWN grpcio answers when a deserializer raises.
    """

    def __init__(self, service: str) -> None:
        self._service = service
        self._tracer = trace.get_tracer("engram_platform.grpc_server")
        self._duration = duration_histogram("server")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None or details.method.startswith("/grpc."):
            return handler
        rpc = _Rpc(
            method=details.method,
            span_name=f"engram.{self._service}/{details.method.rsplit('/', 1)[-1]}",
            carrier={str(k): str(v) for k, v in (details.invocation_metadata or ())},
            tracer=self._tracer,
            duration=self._duration,
        )
        return _wrapped(handler, rpc)


@dataclass(frozen=True)
class _Rpc:
    """One call's bookkeeping: its server span, its duration, its errors as statuses."""

    method: str
    span_name: str
    carrier: dict[str, str]
    tracer: trace.Tracer
    duration: metrics.Histogram

    async def timed(self, call: Callable[[], Awaitable[Any]], context: Context) -> Any:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            return await self._guarded(call, context)
        except asyncio.CancelledError:  # the caller went away or its deadline passed
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            # An abort, ours or the handler's, or a set_code left the status here.
            code = context.code() or code
            self.duration.record(elapsed_ms(started), rpc_attributes(self.method, code))

    async def _guarded(self, call: Callable[[], Awaitable[Any]], context: Context) -> Any:
        with self.tracer.start_as_current_span(
            self.span_name, context=extract_context(self.carrier), kind=trace.SpanKind.SERVER
        ) as span:
            try:
                return await call()
            except EngramError as err:
                span.set_status(SpanStatus.ERROR, err.code)
                metadata = trailing_metadata(err)
                if metadata:
                    context.set_trailing_metadata(metadata)
                await context.abort(status_code(err), err.message)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as exc:  # the one place that turns surprises into INTERNAL
                ref = uuid.uuid4().hex[:12]
                log.exception("unhandled error in %s (ref %s)", self.method, ref)
                span.record_exception(exc)
                span.set_status(SpanStatus.ERROR, "INTERNAL")
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error (ref {ref})")


def _wrapped(handler: Handler, rpc: _Rpc) -> Handler:
    """``handler`` with every call going through ``rpc``, requests decoded tolerantly."""
    deserializer = tolerant(handler.request_deserializer)
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Context) -> Any:
            return await rpc.timed(lambda: inner_uu(_decoded(request), context), context)  # type: ignore[arg-type]

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, deserializer, handler.response_serializer
        )
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Context) -> Any:
            return await rpc.timed(
                lambda: _refused_after_drain(lambda s: inner_su(s, context), requests),  # type: ignore[arg-type]
                context,
            )

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Context) -> None:
            # Written message by message so an error part-way still maps to a status.
            async def drain() -> None:
                messages: AsyncIterator[Any] = inner_us(_decoded(request), context)  # type: ignore[arg-type,assignment]
                async for message in messages:
                    await context.write(message)

            await rpc.timed(drain, context)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, deserializer, handler.response_serializer
        )
    return handler


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer

    async def stop(self, grace: float | None = None) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_server(
    name: str,
    settings: ServiceSettings,
    register: Register,
    service_names: Sequence[str],
) -> RunningServer:
    """Start a server on settings.host:settings.port (0 = a free port) and mark it SERVING;
    TLS (mTLS) when settings.tls says so, its files checked before anything starts."""
    credentials = server_credentials(settings.tls) if settings.tls.on else None
    limit = settings.max_message_bytes
    options: list[tuple[str, int]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        # Off, a second server on a port in use fails to start instead of silently
        # taking half its connections; on only for the worker processes meant to share it.
        ("grpc.so_reuseport", int(sharing_port())),
    ]
    if settings.max_connection_age_s > 0:
        options += [
            ("grpc.max_connection_age_ms", int(settings.max_connection_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(settings.grace_s * 1000)),
        ]
    server = grpc.aio.server(interceptors=[_Interceptor(name)], options=options)
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    address = f"{settings.host}:{settings.port}"
    try:  # grpcio answers a failed bind with RuntimeError or port 0, by version
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"engram-{name}: cannot bind {settings.host}:{settings.port} (in use?)")
    await server.start()
    for svc in ("", *service_names):
        await health_servicer.set(svc, health_pb2.HealthCheckResponse.SERVING)
    security = (
        "plaintext" if credentials is None else f"TLS, client_auth={settings.tls.client_auth}"
    )
    log.info("engram-%s serving on %s:%d (%s)", name, settings.host, port, security)
    return RunningServer(server=server, port=port, health=health_servicer)


def worker_health_name(name: str) -> str:
    """The health service name a worker answers SERVING to once it consumes."""
    return f"engram-{name}"


async def start_health(name: str, settings: ServiceSettings) -> RunningServer:
    """For a worker, which serves no RPCs of its own: the health service alone on
    settings.host:settings.port, SERVING as ``""`` and `worker_health_name`; `stop` turns it
    NOT_SERVING first. Call it once the worker consumes: a probe then means "consuming"."""
    running = await start_server(name, settings, lambda _server: None, [])
    await running.health.set(worker_health_name(name), health_pb2.HealthCheckResponse.SERVING)
    return running


async def serve(
    name: str,
    settings: ServiceSettings,
    register: Register,
    service_names: Sequence[str],
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM, then drain in-flight RPCs and call on_stop."""
    running = await start_server(name, settings, register, service_names)
    tune_for_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("engram-%s stopping", name)
    await running.stop(settings.grace_s)
    if on_stop is not None:
        await on_stop()
