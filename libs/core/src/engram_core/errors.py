"""The one error catalog. Servers map these to gRPC codes; clients map codes back."""

from __future__ import annotations


class EngramError(Exception):
    """Base of every error the system reports on purpose."""

    code = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(EngramError):
    """Bad input; `field` names the offending field (e.g. ``memories[3].importance``)."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(EngramError):
    code = "NOT_FOUND"


class FailedPrecondition(EngramError):
    """The system is not in a state the call needs (e.g. dropping the live generation, or an
    upsert embedded with another model than its target generation); retrying the same call
    does not help until that state changes. `field` names what disagrees."""

    code = "FAILED_PRECONDITION"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Unauthenticated(EngramError):
    code = "UNAUTHENTICATED"


class PermissionDenied(EngramError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(EngramError):
    """Over a limit (rate, queue); `retry_after_s` says when a retry may get in, if known."""

    code = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(EngramError):
    """A dependency is down or overloaded; the caller may retry."""

    code = "UNAVAILABLE"


class DeadlineExceeded(EngramError):
    code = "DEADLINE_EXCEEDED"


class Internal(EngramError):
    code = "INTERNAL"


RETRIABLE: tuple[type[EngramError], ...] = (Unavailable, DeadlineExceeded)
