"""Failed calls become exceptions carrying the code, the message and the field, which the
server names in the BadRequest detail, the engram-field trailer, or both."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from engram_client import Engram, EngramError, InvalidArgument, NotFound, RetryPolicy
from engram_client.retry import should_retry

NO_RETRY = RetryPolicy(attempts=1)


def _bad_request(field: str, message: str) -> bytes:
    detail = any_pb2.Any()
    violation = error_details_pb2.BadRequest.FieldViolation(field=field, description="bad")
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    status = status_pb2.Status(code=3, message=message, details=[detail])
    return bytes(status.SerializeToString())


@pytest.mark.parametrize(
    "trailers",
    [
        pytest.param((("engram-field", "memory.importance"),), id="engram-field trailer"),
        pytest.param(
            (("grpc-status-details-bin", _bad_request("memory.importance", "m: bad")),),
            id="BadRequest detail",
        ),
    ],
)
def test_invalid_argument_names_the_field_from_either_trailer(fake: Any, trailers: Any) -> None:
    fake.fail("Store", grpc.StatusCode.INVALID_ARGUMENT, "m: bad", trailers)
    with Engram(fake.address, retry=NO_RETRY) as engram, pytest.raises(InvalidArgument) as caught:
        engram.store("x", importance=2.0)
    assert caught.value.field == "memory.importance"
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.message == "m: bad"
    assert len(fake.script.of("Store")) == 1  # never retried


def test_other_codes_map_to_their_exception(fake: Any) -> None:
    fake.fail("Get", grpc.StatusCode.NOT_FOUND, "memory x not found")
    with Engram(fake.address, retry=NO_RETRY) as engram, pytest.raises(NotFound) as caught:
        engram.get("x")
    assert isinstance(caught.value, EngramError)
    assert caught.value.field == ""
    assert str(caught.value) == "memory x not found"


def test_only_a_rate_limit_with_a_hint_or_an_idempotent_unavailable_is_retried() -> None:
    limited = EngramError("x", code=grpc.StatusCode.RESOURCE_EXHAUSTED, retry_after_s=0.2)
    too_big = EngramError("x", code=grpc.StatusCode.RESOURCE_EXHAUSTED)
    down = EngramError("x", code=grpc.StatusCode.UNAVAILABLE)
    bad = EngramError("x", code=grpc.StatusCode.INVALID_ARGUMENT)
    assert should_retry(limited, idempotent=False)
    assert not should_retry(too_big, idempotent=True)
    assert should_retry(down, idempotent=True)
    assert not should_retry(down, idempotent=False)
    assert not should_retry(bad, idempotent=True)


def test_the_backoff_grows_is_capped_and_honours_retry_after() -> None:
    policy = RetryPolicy(attempts=10, initial_s=0.1, max_s=1.0, multiplier=2.0, jitter=0.0)
    assert [policy.delay(a) for a in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert policy.delay(1, retry_after_s=0.75) == 0.75
    jittered = RetryPolicy(initial_s=1.0, jitter=0.5)
    assert all(0.5 <= jittered.delay(1) <= 1.0 for _ in range(50))
    down = EngramError("x", code=grpc.StatusCode.UNAVAILABLE)
    assert policy.pause(down, True, attempt=1, left_s=0.05) == -1.0  # past the deadline
    assert policy.pause(down, True, attempt=10, left_s=60.0) == -1.0  # out of attempts
