"""Catalog errors <-> gRPC status codes, in one place for servers and clients."""

from __future__ import annotations

import math

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from engram_core import errors as e

FIELD_KEY = "engram-field"
# The standard rich-status trailer (google.rpc.Status): any gRPC client, in any language,
# reads an INVALID_ARGUMENT's field from its BadRequest detail the same way.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
# Trailing metadata of RESOURCE_EXHAUSTED: milliseconds after which a retry may get in.
RETRY_AFTER_KEY = "retry-after-ms"

TO_CODE: dict[type[e.EngramError], grpc.StatusCode] = {
    e.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    e.NotFound: grpc.StatusCode.NOT_FOUND,
    e.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    e.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    e.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    e.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    e.Unavailable: grpc.StatusCode.UNAVAILABLE,
    e.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    e.Internal: grpc.StatusCode.INTERNAL,
}


def status_code(err: e.EngramError) -> grpc.StatusCode:
    for cls in type(err).__mro__:
        if cls in TO_CODE:
            return TO_CODE[cls]
    return grpc.StatusCode.INTERNAL


# A field path names a client's map keys, so it is escaped and bounded as metadata.
_MAX_FIELD_CHARS = 512


def trailing_metadata(err: e.EngramError) -> tuple[tuple[str, str | bytes], ...]:
    """What a server sends beside the status: the field named (as engram-field and, for
    INVALID_ARGUMENT, as a google.rpc.BadRequest detail), when to retry."""
    out: list[tuple[str, str | bytes]] = []
    field = getattr(err, "field", None)
    if field:
        out.append((FIELD_KEY, _metadata_value(field)))
    if isinstance(err, e.InvalidArgument):
        out.append((STATUS_DETAILS_KEY, bad_request(err).SerializeToString()))
    retry_after = getattr(err, "retry_after_s", None)
    if retry_after is not None:
        out.append((RETRY_AFTER_KEY, str(max(1, math.ceil(retry_after * 1000)))))
    return tuple(out)


def bad_request(err: e.InvalidArgument) -> status_pb2.Status:
    """The rich status of an INVALID_ARGUMENT: code and message as the call's own status
    (clients check they match), one FieldViolation naming the field."""
    violation = error_details_pb2.BadRequest.FieldViolation(field=err.field, description=err.reason)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=err.message, details=[detail])


def _metadata_value(text: str) -> str:
    """``text`` as a metadata value may carry it: printable ASCII (gRPC fails the call with
    INTERNAL otherwise), others escaped, bounded. A field path holds a client's map keys."""
    if text.isascii() and text.isprintable():
        return text[:_MAX_FIELD_CHARS]
    return text.encode("unicode_escape").decode("ascii")[:_MAX_FIELD_CHARS]


def _retry_after_s(err: grpc.aio.AioRpcError) -> float | None:
    for key, value in err.trailing_metadata() or ():
        if key == RETRY_AFTER_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return int(text) / 1000.0 if text.isdigit() else None
    return None


def _field(err: grpc.aio.AioRpcError, detail: str) -> tuple[str, str]:
    """The field named in the trailing metadata (or "") and the detail without its prefix."""
    for key, value in err.trailing_metadata() or ():
        if key == FIELD_KEY and value:
            field = value.decode() if isinstance(value, bytes) else str(value)
            prefix = f"{field}: "
            return field, detail[len(prefix) :] if detail.startswith(prefix) else detail
    return "", detail


def from_rpc_error(err: grpc.aio.AioRpcError, target: str) -> e.EngramError:
    """Turn a failed call into the catalog error the caller would have raised itself."""
    code = err.code()
    detail = err.details() or code.name
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        field = ""
        for key, value in err.trailing_metadata() or ():
            if key == FIELD_KEY:
                field = str(value)
        if field:
            prefix = f"{field}: "
            reason = detail[len(prefix) :] if detail.startswith(prefix) else detail
            return e.InvalidArgument(field, reason)
        return e.InvalidArgument("request", detail)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        field, reason = _field(err, detail)
        return e.FailedPrecondition(field or "request", reason)
    if code == grpc.StatusCode.NOT_FOUND:
        return e.NotFound(detail)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return e.Unauthenticated(detail)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return e.PermissionDenied(detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return e.ResourceExhausted(detail, _retry_after_s(err))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return e.DeadlineExceeded(f"{target}: {detail}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return e.Unavailable(f"{target}: {detail}")
    return e.Internal(f"{target}: {detail}")
