"""A three-node JetStream cluster, as the chart expects (`nats.streamReplicas` 3).

Engram's streams and checkpoint bucket, made with one replica, are brought to three by
the next start with nothing lost; then the node leading the memory stream dies and the
events already acknowledged are still there and new writes go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from engram_consolidate.adapters.checkpoints import BUCKET, open_bucket
from engram_core.errors import Unavailable
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.nats_server import NatsServer, free_ports, start_nats
from engram_testing.waiting import until

NODES = 3
STREAMS = (jsm.STREAM_MEMORY, jsm.STREAM_ACCESS, jsm.STREAM_DEADLETTER, f"KV_{BUCKET}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, NatsServer]]:
    ports = free_ports(2 * NODES)
    client, route = ports[:NODES], ports[NODES:]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in route)
    nodes: dict[str, NatsServer] = {}
    try:
        for i in range(NODES):
            name = f"n{i}"
            cluster_args = ["--server_name", name, "--cluster_name", "engram"]
            cluster_args += ["--cluster", f"nats://127.0.0.1:{route[i]}", "--routes", routes]
            nodes[name] = start_nats(tmp_path / name, client[i], args=cluster_args)
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


async def in_step(js: JetStreamContext, stream: str) -> bool:
    """Every replica of the stream is current with its leader."""
    info = await js.stream_info(stream)
    peers = (info.cluster.replicas or []) if info.cluster else []
    return len(peers) == NODES - 1 and all(p.current for p in peers)


async def test_streams_go_to_three_replicas_and_outlive_a_node(
    cluster: dict[str, NatsServer],
) -> None:
    url = ",".join(node.url for node in cluster.values())
    one = NatsSettings(url=url, stream_replicas=1)
    three = NatsSettings(url=url, stream_replicas=3)
    nc, js = await jsm.connect(one, "test")
    try:
        await jsm.ensure_streams(js, one)  # waits while the new cluster elects its leader
        kv = await open_bucket(js, 1)
        subject = jsm.subject("acme", jsm.MEMORY_STORED)
        first, _ = await jsm.publish(js, subject, b"stored before", "event-1")
        await kv.put("checkpoint", b"kept")
        assert (await js.stream_info(jsm.STREAM_MEMORY)).config.num_replicas == 1

        # The next start, configured for three replicas.
        await jsm.ensure_streams(js, three)
        await open_bucket(js, 3)
        for stream in STREAMS:
            assert (await js.stream_info(stream)).config.num_replicas == 3
            await until(partial(in_step, js, stream), timeout_s=30, interval_s=0.2)

        info = await js.stream_info(jsm.STREAM_MEMORY)
        assert info.cluster is not None
        assert info.cluster.leader in cluster
        cluster[info.cluster.leader].stop()  # the pod holding the stream's lead dies

        async def writes() -> bool:
            try:
                await jsm.publish(js, subject, b"stored after", "event-2", timeout_s=1.0)
            except Unavailable:  # a new leader is being elected
                return False
            return True

        await until(writes, timeout_s=30, interval_s=0.5)
        assert (await js.get_msg(jsm.STREAM_MEMORY, first)).data == b"stored before"
        assert (await js.stream_info(jsm.STREAM_MEMORY)).state.messages == 2

        async def checkpoint_kept() -> bool:
            try:  # the bucket's stream may have lost its leader too
                kv = await open_bucket(js, 3)
                return (await kv.get("checkpoint")).value == b"kept"
            except NatsTimeout:
                return False

        await until(checkpoint_kept, timeout_s=30, interval_s=0.5)
    finally:
        await nc.close()
