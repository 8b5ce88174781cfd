"""Failed calls as exceptions: the status code, the message and the field the server named."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import grpc
from google.rpc import error_details_pb2, status_pb2

# What the servers send beside an error's status (engram_platform.errors writes them).
FIELD_KEY = "engram-field"
RETRY_AFTER_KEY = "retry-after-ms"
STATUS_DETAILS_KEY = "grpc-status-details-bin"

Metadata = Sequence[tuple[str, str | bytes]]


class FailedCall(Protocol):
    """What both grpc.RpcError (sync) and grpc.aio.AioRpcError answer."""

    def code(self) -> grpc.StatusCode: ...
    def details(self) -> str | None: ...
    def trailing_metadata(self) -> Metadata | None: ...


class EngramError(Exception):
    """A call the server (or the connection) refused; ``code`` is its gRPC status."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        field: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.field = field  # the request field the server named ("" when none)
        self.retry_after_s = retry_after_s  # RESOURCE_EXHAUSTED: when a retry may get in


class InvalidArgument(EngramError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(EngramError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(EngramError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(EngramError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(EngramError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(EngramError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(EngramError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(EngramError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(EngramError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE: dict[grpc.StatusCode, type[EngramError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        FailedPrecondition,
        Unauthenticated,
        PermissionDenied,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Internal,
    )
}


def from_call(err: FailedCall) -> EngramError:
    """The exception for a failed call, with the field from the BadRequest detail or the
    engram-field trailer, and the retry-after-ms hint."""
    code = err.code()
    message = err.details() or code.name
    metadata = list(err.trailing_metadata() or ())
    field = _bad_request_field(metadata) or _text(metadata, FIELD_KEY)
    retry_ms = _text(metadata, RETRY_AFTER_KEY)
    retry_after = int(retry_ms) / 1000.0 if retry_ms.isdigit() else None
    cls = _BY_CODE.get(code, EngramError)
    return cls(message, code=code, field=field, retry_after_s=retry_after)


def _text(metadata: Metadata, key: str) -> str:
    for k, value in metadata:
        if k == key:
            return value.decode() if isinstance(value, bytes) else value
    return ""


def _bad_request_field(metadata: Metadata) -> str:
    for key, value in metadata:
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad) and bad.field_violations:
                return str(bad.field_violations[0].field)
    return ""
