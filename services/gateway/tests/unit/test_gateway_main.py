"""Settings from the environment, and ``python -m engram_gateway`` as a process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import ValidationError

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.limits import MAX_CONTENT_BYTES, MAX_METADATA_BYTES
from engram_gateway.config import Settings
from engram_testing.nats_server import NatsServer, free_port, start_nats


def test_settings_come_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_NATS__URL", "nats://10.0.0.1:4222")
    monkeypatch.setenv("ENGRAM_GATEWAY_TOKENS", "dev-token=default:read+write+admin")
    monkeypatch.setenv("ENGRAM_GATEWAY_STREAMS__VECTOR_BUDGET__CAP_S", "0.75")
    monkeypatch.setenv("ENGRAM_GATEWAY_LEXICAL_ADDR", "127.0.0.1:6000")
    monkeypatch.setenv("ENGRAM_GATEWAY_MAX_CONTENT_BYTES", "1024")
    s = Settings()
    assert s.port == 50051
    assert s.nats.url == "nats://10.0.0.1:4222"
    assert s.tokens.get_secret_value() == "dev-token=default:read+write+admin"
    assert "dev-token" not in repr(s)
    assert s.streams.vector_budget.cap_s == 0.75
    assert s.streams.vector_budget.fraction == 0.5
    assert s.lexical_addr == "127.0.0.1:6000"
    assert s.limits().max_content_bytes == 1024


def test_every_setting_is_described() -> None:
    missing = [n for n, f in Settings.model_fields.items() if not f.description]
    assert missing == []


def test_idempotency_must_outlive_the_duplicate_window() -> None:
    with pytest.raises(ValidationError, match="duplicate window"):
        Settings(idempotency_ttl_s=60, nats={"duplicate_window_s": 120})


@pytest.mark.parametrize(
    ("setting", "value"),
    [("seeds", 33), ("limit", 126)],  # past vector SearchMany's caps
)
def test_context_reads_stay_within_one_vector_call(setting: str, value: int) -> None:
    with pytest.raises(ValidationError, match=setting):
        Settings(context={setting: value})
    Settings(context={setting: value - 1})


@pytest.mark.parametrize(
    ("setting", "value"),
    [("max_content_bytes", MAX_CONTENT_BYTES), ("max_metadata_bytes", MAX_METADATA_BYTES)],
)
def test_sizes_stay_within_what_every_store_takes(setting: str, value: int) -> None:
    with pytest.raises(ValidationError, match=setting):
        Settings(**{setting: value + 1})
    Settings(**{setting: value})


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    srv = start_nats(tmp_path / "nats")
    yield srv
    srv.stop()


@pytest.mark.parametrize("workers", [1, 2])
async def test_python_m_engram_gateway_serves_with_env_settings(
    nats_server: NatsServer, tmp_path: Path, workers: int
) -> None:
    """Also as two worker processes on the port (engram_platform.workers)."""
    port = free_port()
    dead = free_port()  # no store is running: reads degrade, writes still reach the log
    env = {
        **os.environ,
        "ENGRAM_HOME": str(tmp_path / "home"),
        "ENGRAM_GATEWAY_PORT": str(port),
        "ENGRAM_GATEWAY_WORKERS": str(workers),
        "ENGRAM_GATEWAY_METRICS__PORT": "0",
        "ENGRAM_GATEWAY_NATS__URL": nats_server.url,
        "ENGRAM_GATEWAY_TOKENS": "dev-token=default:read+write+admin",
        "ENGRAM_GATEWAY_VECTOR_ADDR": f"127.0.0.1:{dead}",
        "ENGRAM_GATEWAY_LEXICAL_ADDR": f"127.0.0.1:{dead}",
        "ENGRAM_GATEWAY_GRAPH_ADDR": f"127.0.0.1:{dead}",
        "ENGRAM_GATEWAY_SCORING_ADDR": f"127.0.0.1:{dead}",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "engram_gateway",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    auth = (("authorization", "Bearer dev-token"),)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service="engram.gateway.v1.MemoryService"),
                wait_for_ready=True,
                timeout=30,
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            stored = await stub.Store(
                gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=CONTENT)),
                metadata=auth,
                timeout=10,
            )
            assert stored.sequence == 1
            stats = await stub.Stats(gateway_pb2.StatsRequest(), metadata=auth, timeout=10)
            assert stats.tenant == "default"
            assert dict(stats.counts) == {"vector": -1, "lexical": -1, "graph": -1}
            assert stats.last_sequence == 1
            traced = (*auth, ("traceparent", f"00-{TRACE_ID}-00f067aa0ba902b7-01"))
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.Recall(gateway_pb2.RecallRequest(query=QUERY), metadata=traced)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, out.decode(errors="replace")
    _check_log_lines(out.decode())


CONTENT = "the zeppelin hangar beside the lighthouse"
QUERY = "where is the zeppelin hangar"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _check_log_lines(out: str) -> None:
    """JSON lines by default; the recall's degraded-store lines carry the caller's trace id
    and the token's tenant; no line holds the content, the query or the token."""
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any("serving on" in line["message"] for line in lines)
    assert {line["service"] for line in lines} == {"engram-gateway"}
    in_recall = [line for line in lines if line.get("trace_id") == TRACE_ID]
    assert in_recall, out
    assert {line["tenant"] for line in in_recall} == {"default"}
    assert all(len(line["span_id"]) == 16 for line in in_recall)
    for secret in ("zeppelin", "dev-token"):
        assert secret not in out
