"""A real nats-server: streams on disk, de-duplication by Nats-Msg-Id, the ack-floor watermark."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import NotFoundError

from engram_core.errors import FailedPrecondition, Unavailable
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import NatsServer, free_port, start_nats
from engram_testing.waiting import until


@pytest.fixture
def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()


async def test_publish_dedupes_and_watermark_follows_acks(nats_server: NatsServer) -> None:
    settings = NatsSettings(url=nats_server.url)
    nc, js = await jsm.connect(settings, "test")
    try:
        await jsm.ensure_streams(js, settings)
        await jsm.ensure_streams(js, settings)  # idempotent
        subj = jsm.subject("t1", jsm.MEMORY_STORED)
        seq1, dup1 = await jsm.publish(js, subj, b"a", "event-1")
        seq2, dup2 = await jsm.publish(js, subj, b"a", "event-1")
        seq3, _ = await jsm.publish(js, subj, b"b", "event-2")
        assert (seq1, dup1) == (1, False)
        assert (seq2, dup2) == (1, True)
        assert seq3 == 2
        assert await jsm.last_sequence(js) == 2
        assert await jsm.watermark(js) == 0

        sub = await js.pull_subscribe(
            "",
            durable=jsm.DURABLE_INGEST,
            stream=jsm.STREAM_MEMORY,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
        )
        first, second = await sub.fetch(2, timeout=5)
        await second.ack_sync()
        # Acked out of order: the watermark must not run ahead of the gap.
        assert await jsm.watermark(js) == 0
        await first.ack_sync()
        assert await jsm.watermark(js) == 2
    finally:
        await nc.close()


async def test_a_refused_replica_count_fails_naming_the_setting_and_keeps_the_stream(
    nats_server: NatsServer,
) -> None:
    settings = NatsSettings(url=nats_server.url)
    nc, js = await jsm.connect(settings, "test")
    try:
        await jsm.ensure_streams(js, settings)
        seq, _ = await jsm.publish(js, jsm.subject("t1", jsm.MEMORY_STORED), b"a", "event-1")
        clustered = NatsSettings(url=nats_server.url, stream_replicas=3)
        # This server is not clustered: it refuses three replicas, and says so.
        with pytest.raises(FailedPrecondition) as refused:
            await jsm.ensure_streams(js, clustered)
        message = str(refused.value)
        assert "NATS__STREAM_REPLICAS" in message
        assert jsm.STREAM_MEMORY in message
        assert "3 replica" in message
        assert "clustered" in message  # the server's own reason
        info = await js.stream_info(jsm.STREAM_MEMORY)
        assert info.config.num_replicas == 1
        assert info.state.last_seq == seq
    finally:
        await nc.close()


async def test_connect_waits_for_a_server_that_starts_later_logging_one_line_a_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    settings = NatsSettings(url=f"nats://127.0.0.1:{port}", connect_timeout_s=0.5)
    caplog.set_level(logging.DEBUG)
    connecting = asyncio.create_task(jsm.connect(settings, "test"))
    await until(lambda: "Connect call failed" in caplog.text, timeout_s=10)
    server = start_nats(tmp_path / "late", port)  # e.g. NATS's pod is ready after ours
    try:
        nc, _ = await asyncio.wait_for(connecting, 15)
        assert nc.is_connected
        await nc.close()
    finally:
        server.stop()
    tries = [r for r in caplog.records if r.name == jsm.__name__]
    assert tries
    assert all(r.getMessage().startswith(f"NATS at {settings.url}: ") for r in tries)
    assert all(r.exc_info is None for r in caplog.records)  # no traceback per attempt
    assert "Traceback" not in caplog.text


class SlowJetStream:
    """A JetStream that does not answer its first `silent` calls (a cluster electing)."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.added: list[StreamConfig] = []

    async def stream_info(self, name: str) -> None:
        if self.silent:
            self.silent -= 1
            raise NatsTimeout
        raise NotFoundError

    async def add_stream(self, config: StreamConfig) -> None:
        self.added.append(config)


async def test_ensure_stream_waits_for_jetstream_up_to_its_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = StreamConfig(name="S", subjects=["s.>"])
    answers = SlowJetStream(silent=2)
    await jsm.ensure_stream(answers, config, wait_s=10)  # type: ignore[arg-type]
    assert answers.added == [config]
    assert caplog.text.count("trying again") == 2
    with pytest.raises(Unavailable, match="stream S"):
        await jsm.ensure_stream(SlowJetStream(silent=1), config)  # type: ignore[arg-type]


async def test_a_tenants_decided_walk_says_how_far_it_got(nats_server: NatsServer) -> None:
    settings = NatsSettings(url=nats_server.url)
    nc, js = await jsm.connect(settings, "test")
    try:
        await jsm.ensure_streams(js, settings)
        seqs = []
        for n in range(10):
            for tenant in ("a", "b"):
                subj = jsm.subject(tenant, jsm.MEMORY_STORED)
                seq, _ = await jsm.publish(js, subj, b"x", f"{tenant}-{n}")
                if tenant == "b":
                    seqs.append(seq)
        await jsm.mark_decided(js, [("b", s) for s in seqs if s != seqs[7]])
        last = seqs[-1]
        # b's 8th event is not decided: the walk stops before it.
        assert await jsm.tenant_decided_through(js, "b", 0, last) == seqs[7] - 1
        # Three lookups: as far as the third of b's events, for the next walk to go on from.
        assert await jsm.tenant_decided_through(js, "b", 0, last, lookups=3) == seqs[2]
        assert await jsm.tenant_decided_through(js, "b", seqs[7], last) == last
        assert not await jsm.tenant_decided(js, "b", 0, last)
        assert await jsm.tenant_decided(js, "b", seqs[7], last)
    finally:
        await nc.close()
