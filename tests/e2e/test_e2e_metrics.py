"""Every service of the embedded stack serves /metrics: after a Store and a Recall, the RPC
durations on both sides of each call moved, the process metrics are there, and no label
carries what was stored or asked."""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import START_ORDER, DevStack
from engram_testing.e2e import AUTH, recall, wait_for_watermark

CONTENT = "Ottilie keeps the spare keys of the Lisbon office in the blue cabinet"
QUERY = "where are the spare keys of the Lisbon office"
RPC_LABELS = {"rpc_system", "rpc_service", "rpc_method", "rpc_grpc_status_code"}
PROCESS = ("process_cpu_time_seconds_total", "process_memory_usage_bytes")
CHANNELS = "engram_grpc_channels_open"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def scrape(stack: DevStack, name: str) -> tuple[str, list[Sample]]:
    with urllib.request.urlopen(stack.metrics_url(name), timeout=10) as reply:
        text = reply.read().decode()
    samples = [
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    return text, samples


def calls(samples: list[Sample], side: str, service: str, method: str = "") -> float:
    """How many RPCs of ``service`` (``method`` if given) ended OK, as ``side`` saw them."""
    return sum(
        s.value
        for s in samples
        if s.name == f"rpc_{side}_duration_milliseconds_count"
        and s.labels["rpc_service"] == service
        and s.labels["rpc_method"] == (method or s.labels["rpc_method"])
        and s.labels["rpc_grpc_status_code"] == "0"
    )


@pytest.fixture(scope="module")
def scraped(stack: DevStack) -> dict[str, tuple[str, list[Sample]]]:
    async def store_and_recall() -> None:
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
            stored = await gateway.Store(
                gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=CONTENT)),
                metadata=AUTH,
            )
            await wait_for_watermark(gateway, stored.sequence)
            reply = await recall(gateway, query=QUERY, limit=3)
            assert reply.results[0].memory.id == stored.id

    asyncio.run(store_and_recall())
    return {name: scrape(stack, name) for name in START_ORDER}


def test_every_service_serves_its_process_metrics(
    scraped: dict[str, tuple[str, list[Sample]]],
) -> None:
    for name, (_, samples) in scraped.items():
        names = {s.name for s in samples}
        assert {*PROCESS, CHANNELS} <= names, name
        info = [s for s in samples if s.name == "target_info"]
        assert [i.labels["service_name"] for i in info] == [f"engram-{name}"]
        cpu_modes = {s.labels["cpu_mode"] for s in samples if s.name == PROCESS[0]}
        assert cpu_modes == {"user", "system"}, name
    _, gateway = scraped["gateway"]
    # Vector, lexical, graph and scoring: the gateway holds a channel to each.
    assert next(s.value for s in gateway if s.name == CHANNELS) >= 4


def test_the_store_and_the_recall_moved_the_rpc_durations_on_both_sides(
    scraped: dict[str, tuple[str, list[Sample]]],
) -> None:
    _, gateway = scraped["gateway"]
    assert calls(gateway, "server", "engram.gateway.v1.MemoryService", "Store") >= 1
    assert calls(gateway, "server", "engram.gateway.v1.MemoryService", "Recall") >= 1
    for store in ("vector", "lexical", "scoring"):
        service = f"engram.{store}.v1.{store.capitalize()}Service"
        assert calls(gateway, "client", service) >= 1, store  # the recall's streams
        assert calls(scraped[store][1], "server", service) >= 1, store
    _, ingest = scraped["ingest"]
    for store in ("vector", "lexical", "graph"):
        service = f"engram.{store}.v1.{store.capitalize()}Service"
        assert calls(ingest, "client", service) >= 1, store  # the stored memory applied
        assert calls(scraped[store][1], "server", service) >= 1, store


def test_rpc_series_carry_the_convention_labels_and_nothing_stored_or_asked(
    scraped: dict[str, tuple[str, list[Sample]]],
) -> None:
    for name, (text, samples) in scraped.items():
        for sample in samples:
            if sample.name.startswith(("rpc_server_duration", "rpc_client_duration")):
                assert set(sample.labels) - {"le"} == RPC_LABELS, (name, sample)
                assert sample.labels["rpc_system"] == "grpc"
        for word in ("Ottilie", "Lisbon", "cabinet"):
            assert word not in text, name
