"""End to end through the public API: the query-side models — HyDE, LLM
decomposition and an HTTP cross-encoder against a fake model server, and the local
cross-encoder `make models` builds.

Mix `QueryModelsEndToEnd` and `LocalRerankerEndToEnd` into ``Test*`` classes next to a
conftest that provides ``stack`` (as for `GatewayEndToEnd`). The stack's own gateway runs no
model, so each mixin starts a second gateway process on the same stack: the first with every
model pointed at a fake OpenAI-compatible server running in this process (a thread; no
network beyond 127.0.0.1), the second with the local reranker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_embed.paths import RERANKER, default_model_dir
from engram_testing.devstack import DevStack, replica
from engram_testing.e2e import AUTH, Stub, recall

# The fake cross-encoder's favourite word, and the fake chat model's answers.
FAVOURITE = "zeppelin"
HYPOTHESIS = "The violin lessons with Marguerite are on Thursday evenings at the conservatory."
BROKEN = "please fail"  # a query the fake chat model answers with a 500


@dataclass
class FakeModels:
    """What the fake server was asked (path → JSON bodies)."""

    asked: dict[str, list[Any]] = field(default_factory=dict)

    def answer(self, path: str, body: Any) -> tuple[int, Any]:
        self.asked.setdefault(path, []).append(body)
        if path.endswith("/rerank"):
            docs: Sequence[str] = body["documents"]
            scores = [1.0 if FAVOURITE in d.lower() else 0.0 for d in docs]
            return 200, {
                "results": [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
            }
        if path.endswith("/chat/completions"):
            system, user = (m["content"] for m in body["messages"])
            if BROKEN in user:
                return 500, {"error": "model crashed"}
            if "JSON list" in system:  # the decomposer's prompt
                text = json.dumps(["Marguerite violin", "conservatory schedule"])
            else:
                text = HYPOTHESIS
            return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}
        return 404, {"error": "no such path"}


def _serve(models: FakeModels) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            status, reply = models.answer(self.path, json.loads(self.rfile.read(length)))
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest's output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def second_gateway(stack: DevStack, settings: dict[str, str]) -> Iterator[str]:
    """Another gateway process on ``stack`` with ``settings`` added to its environment."""
    with replica(stack, "gateway", settings) as other:
        yield other.gateway_address


async def store(gateway: Stub, tag: str, contents: Sequence[str]) -> tuple[list[str], int]:
    reply = await gateway.StoreBatch(
        gateway_pb2.StoreBatchRequest(
            memories=[common_pb2.MemoryInput(content=c, tags=[tag]) for c in contents]
        ),
        metadata=AUTH,
    )
    return list(reply.ids), reply.sequence


class SecondGatewayFixture:
    """``gateway``: a stub on a second gateway of the suite's ``stack``, started with the
    environment the class's ``second_gateway_settings`` fixture gives."""

    @pytest.fixture(scope="class")
    @classmethod
    def second_gateway_address(
        cls, stack: DevStack, second_gateway_settings: dict[str, str]
    ) -> Iterator[str]:
        with second_gateway(stack, second_gateway_settings) as address:
            yield address

    @pytest.fixture
    async def gateway(self, second_gateway_address: str) -> AsyncIterator[Stub]:
        async with grpc.aio.insecure_channel(second_gateway_address) as channel:
            yield gateway_pb2_grpc.MemoryServiceStub(channel)


class QueryModelsEndToEnd(SecondGatewayFixture):
    @pytest.fixture(scope="class")
    @classmethod
    def fake_models(cls) -> Iterator[tuple[FakeModels, str]]:
        models = FakeModels()
        server = _serve(models)
        try:
            yield models, f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()

    @pytest.fixture(scope="class")
    @classmethod
    def second_gateway_settings(cls, fake_models: tuple[FakeModels, str]) -> dict[str, str]:
        """Every model pointed at the fake server."""
        _, url = fake_models
        return {
            "ENGRAM_GATEWAY_HYDE__BASE_URL": url,
            "ENGRAM_GATEWAY_DECOMPOSE_MODEL__BASE_URL": url,
            "ENGRAM_GATEWAY_DECOMPOSE_MODEL__ENABLED": "true",
            "ENGRAM_GATEWAY_RERANKER__BASE_URL": url,
            "ENGRAM_GATEWAY_RERANKER__MODE": "replace",
            "ENGRAM_GATEWAY_RECALL_CACHE_TTL_S": "0",
        }

    async def test_rerank_puts_the_cross_encoders_pick_first(
        self, gateway: Stub, fake_models: tuple[FakeModels, str]
    ) -> None:
        tag = "suite:rerank"
        (close, also, zeppelin), seq = await store(
            gateway,
            tag,
            [
                "The airship museum opens its airship hangar tours on Sunday",
                "Airship hangar tours are sold out for the museum this month",
                "We once watched a zeppelin drift over the lake",
            ],
        )
        plain = await recall(gateway, query="airship hangar tours", tags=[tag], min_sequence=seq)
        assert plain.results[0].memory.id != zeppelin
        assert list(plain.models) == []
        reply = await recall(
            gateway, query="airship hangar tours", tags=[tag], rerank=True, min_sequence=seq
        )
        assert list(reply.models) == ["rerank"]
        assert reply.results[0].memory.id == zeppelin
        assert reply.results[0].components["rerank"] == 1.0
        assert {r.memory.id for r in reply.results} == {close, also, zeppelin}
        models, _ = fake_models
        assert models.asked["/v1/rerank"][-1]["query"] == "airship hangar tours"

    async def test_hyde_answer_reaches_the_vector_stream(self, gateway: Stub) -> None:
        tag = "suite:hyde"
        (violin, *_), seq = await store(
            gateway,
            tag,
            [
                "Violin lessons with Marguerite are on Thursday evenings at the conservatory",
                "The quarterly budget review moved to the boardroom",
                "Our cat knocked the plant off the windowsill again",
            ],
        )
        reply = await recall(
            gateway,
            query="when do I practise music?",
            tags=[tag],
            mode=gateway_pb2.RECALL_MODE_VECTOR,
            hyde=True,
            limit=1,
            min_sequence=seq,
        )
        assert list(reply.models) == ["hyde"]
        assert reply.results[0].memory.id == violin

    async def test_a_failing_model_degrades_but_answers(self, gateway: Stub) -> None:
        tag = "suite:hyde-broken"
        (only,), seq = await store(gateway, tag, [f"Remember to {BROKEN} the tests"])
        reply = await recall(
            gateway, query=f"{BROKEN} tests", tags=[tag], hyde=True, min_sequence=seq
        )
        assert list(reply.models_failed) == ["hyde"]
        assert "hyde" in reply.degraded
        assert [r.memory.id for r in reply.results] == [only]

    async def test_llm_decomposition_runs_its_sub_queries(
        self, gateway: Stub, fake_models: tuple[FakeModels, str]
    ) -> None:
        tag = "suite:decompose-llm"
        (teacher, schedule, _), seq = await store(
            gateway,
            tag,
            [
                "Marguerite teaches violin to beginners",
                "The conservatory schedule is posted on the door",
                "Lunch is at noon on Fridays",
            ],
        )
        reply = await recall(
            gateway,
            query="what does she teach and where is it posted?",
            tags=[tag],
            decompose=True,
            min_sequence=seq,
        )
        assert list(reply.models) == ["decompose"]
        assert {teacher, schedule} <= {r.memory.id for r in reply.results[:2]}
        streams = {k for r in reply.results for k in r.streams}
        assert {"query:1", "query:2"} <= streams  # the model's two sub-queries ran
        models, _ = fake_models
        asked = [b["messages"][1]["content"] for b in models.asked["/v1/chat/completions"]]
        assert "what does she teach and where is it posted?" in asked


class LocalRerankerEndToEnd(SecondGatewayFixture):
    """``reranker.backend=local``: the real cross-encoder re-orders a recall's head."""

    @pytest.fixture(scope="class")
    @classmethod
    def second_gateway_settings(cls) -> dict[str, str]:
        return {
            "ENGRAM_GATEWAY_RERANKER__BACKEND": "local",
            # The stack has a home of its own; the model is where `make models` put it.
            "ENGRAM_GATEWAY_RERANKER__MODEL_DIR": str(default_model_dir(RERANKER)),
            "ENGRAM_GATEWAY_RERANKER__MODE": "replace",
            "ENGRAM_GATEWAY_RERANKER__TIMEOUT_S": "10",
            "ENGRAM_GATEWAY_RECALL_CACHE_TTL_S": "0",
        }

    async def test_the_local_cross_encoder_puts_the_answer_first(self, gateway: Stub) -> None:
        tag = "suite:rerank-local"
        (answer, *others), seq = await store(
            gateway,
            tag,
            [
                "The deploy server moved to the Frankfurt data centre in March",
                "Deploy day again: the server team ordered pizza for everyone",
                "Frankfurt has a lovely old town down by the river",
            ],
        )
        query = "where does the deploy server live now?"
        plain = await recall(gateway, query=query, tags=[tag], min_sequence=seq)
        assert list(plain.models) == []
        reply = await recall(gateway, query=query, tags=[tag], rerank=True, min_sequence=seq)
        assert list(reply.models) == ["rerank"]
        cross = {r.memory.id: r.components["rerank"] for r in reply.results}
        assert set(cross) == {answer, *others}
        assert cross[answer] > max(cross[o] for o in others)
        assert reply.results[0].memory.id == answer  # replace: the cross-encoder's order
