"""Query-side models over HTTP (issue #4): the adapters and the recall, against a fake model
server on 127.0.0.1 — success, timeout, 500 and malformed replies for HyDE, the LLM
decomposer and the reranker; every failure leaves the recall whole and is reported."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.entities import EntityRules, conversation_rules
from engram_core.errors import Unavailable
from engram_gateway import server as gateway_server
from engram_gateway.adapters.openai_models import (
    ChatDecomposer,
    ChatHyde,
    ChatModel,
    HttpReranker,
    JsonEndpoint,
)
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import Backends, build_gateway, build_models
from engram_gateway.service import Deadline, RecallRequest
from engram_gateway.service.models import FallbackDecomposer, ModelTrace, tracing
from engram_gateway.service.ports import RecallResult

CHAT = "/v1/chat/completions"
RERANK = "/v1/rerank"


@dataclass
class Reply:
    body: Any = None  # JSON-encoded; bytes are sent as they are
    status: int = 200
    delay: float = 0.0


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ModelServer:
    """A minimal HTTP/1.1 server: each path answers with its Reply (or a function of the
    request body returning one) and every request is recorded."""

    replies: dict[str, Reply | Callable[[Any], Reply]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    base_url: str = ""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def of(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client gave up (a timeout test), or stop() ended an idle keep-alive
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: httpx reuses the connection
            line = await reader.readline()
            if not line:
                return
            _, path, _ = line.decode().split(" ", 2)
            headers: dict[str, str] = {}
            while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                k, v = h.decode().split(":", 1)
                headers[k.strip().lower()] = v.strip()
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            body = json.loads(raw) if raw else None
            self.requests.append(Request(path, headers, body))
            spec = self.replies.get(path, Reply({"error": "no such path"}, status=404))
            reply = spec(body) if callable(spec) else spec
            if reply.delay:
                await asyncio.sleep(reply.delay)
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            head = (
                f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    s = ModelServer()
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


def chat(content: str) -> Reply:
    return Reply({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})


def endpoint(server: ModelServer, path: str, timeout_s: float = 2.0, **kw: Any) -> JsonEndpoint:
    path = path.removeprefix("/v1")
    return JsonEndpoint("test model", server.base_url, path, timeout_s=timeout_s, **kw)


# --- the HTTP plumbing ---------------------------------------------------------------------


async def test_endpoint_sends_the_key_from_its_file(server: ModelServer, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    server.replies[CHAT] = chat("ok")
    ep = endpoint(server, CHAT, api_key_file=key)
    try:
        assert await ChatModel(ep, "m", 16).complete("sys", "hello") == "ok"
    finally:
        await ep.close()
    (req,) = server.requests
    assert req.headers["authorization"] == "Bearer s3cret"
    assert req.body["model"] == "m"
    assert req.body["temperature"] == 0
    assert req.body["max_tokens"] == 16
    assert [m["role"] for m in req.body["messages"]] == ["system", "user"]
    assert req.body["messages"][1]["content"] == "hello"


def test_an_empty_key_file_is_refused_at_startup(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("  \n")
    with pytest.raises(Unavailable, match="empty"):
        JsonEndpoint("hyde", "http://127.0.0.1:9/v1", "/chat/completions", api_key_file=key)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply({"error": "overloaded"}, status=500), "answered 500"),
        (Reply(b"{not json", status=200), "not JSON"),
        (Reply({"choices": []}), "choices"),
        (Reply({"choices": [{"message": {"content": "   "}}]}), "empty"),
        (Reply({"choices": [{"message": {"content": 7}}]}), "empty"),
    ],
)
async def test_chat_failures_are_unavailable(
    server: ModelServer, reply: Reply, message: str
) -> None:
    server.replies[CHAT] = reply
    hyde = ChatHyde(ChatModel(endpoint(server, CHAT), "m", 64))
    try:
        with pytest.raises(Unavailable, match=message):
            await hyde.hypothesise("where did Sarah go?")
    finally:
        await hyde.close()


async def test_an_error_body_echoing_the_prompt_stays_out_of_the_message(
    server: ModelServer,
) -> None:
    # The message is logged at WARNING when a model fails; a body quoting the query is not.
    server.replies[CHAT] = Reply({"detail": "bad input: where did Sarah go?"}, status=422)
    hyde = ChatHyde(ChatModel(endpoint(server, CHAT), "m", 64))
    try:
        with pytest.raises(Unavailable, match="answered 422") as err:
            await hyde.hypothesise("where did Sarah go?")
    finally:
        await hyde.close()
    assert "Sarah" not in str(err.value)


async def test_a_slow_model_times_out_within_the_callers_budget(server: ModelServer) -> None:
    server.replies[CHAT] = Reply(chat("late").body, delay=2.0)
    hyde = ChatHyde(ChatModel(endpoint(server, CHAT, timeout_s=5.0), "m", 64))
    try:
        # The reply comes before the configured 5 s: only the caller's 0.2 s can time it out.
        with pytest.raises(Unavailable, match="Timeout"):
            await hyde.hypothesise("q", timeout=0.2)
    finally:
        await hyde.close()


async def test_nothing_listening_is_unavailable() -> None:
    ep = JsonEndpoint("reranker", "http://127.0.0.1:9", "/rerank", timeout_s=1.0)
    try:
        with pytest.raises(Unavailable, match="reranker"):
            await HttpReranker(ep, "m").score("q", ["a"])
    finally:
        await ep.close()


# --- HyDE and the decomposer -----------------------------------------------------------------


async def test_hyde_answer_is_capped(server: ModelServer) -> None:
    server.replies[CHAT] = chat("  Sarah went to Lisbon in May 2023. " * 40)
    hyde = ChatHyde(ChatModel(endpoint(server, CHAT), "m", 64), max_chars=50)
    try:
        text = await hyde.hypothesise("Where did Sarah go?")
    finally:
        await hyde.close()
    assert text.startswith("Sarah went to Lisbon")
    assert len(text) == 50


@pytest.mark.parametrize(
    ("content", "parts"),
    [
        ('["Sarah hobbies", "Jon hobbies"]', ["Sarah hobbies", "Jon hobbies"]),
        ('```json\n["Sarah hobbies", "Jon hobbies"]\n```', ["Sarah hobbies", "Jon hobbies"]),
        ('{"queries": ["a b", "a b", " ", "c d"]}', ["a b", "c d"]),
        # The question itself is no part: it runs anyway.
        ('["Did Sarah and Jon both dance?"]', []),
        ("[]", []),
        ('["p1", "p2", "p3", "p4"]', ["p1", "p2", "p3"]),
    ],
)
async def test_decomposer_reads_a_json_list(
    server: ModelServer, content: str, parts: list[str]
) -> None:
    server.replies[CHAT] = chat(content)
    dec = ChatDecomposer(ChatModel(endpoint(server, CHAT), "m", 64), max_queries=3)
    try:
        assert await dec.decompose("Did Sarah and Jon both dance?", conversation_rules()) == parts
    finally:
        await dec.close()
    assert "at most 3" in server.requests[0].body["messages"][0]["content"]


@pytest.mark.parametrize("content", ["Sarah hobbies, Jon hobbies", '{"q": ["a"]}', "[1, 2]"])
async def test_decomposer_refuses_what_is_not_a_list_of_strings(
    server: ModelServer, content: str
) -> None:
    server.replies[CHAT] = chat(content)
    dec = ChatDecomposer(ChatModel(endpoint(server, CHAT), "m", 64))
    try:
        with pytest.raises(Unavailable, match="no list"):
            await dec.decompose("q", conversation_rules())
    finally:
        await dec.close()


class Rules:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def decompose(self, query: str, rules: EntityRules) -> list[str]:
        self.calls.append(query)
        return ["rule part"]


@pytest.mark.parametrize(
    "reply",
    [
        Reply({"error": "boom"}, status=500),
        Reply(b"<html>", status=200),
        chat("not json at all"),
        Reply(chat('["late"]').body, delay=1.0),
    ],
)
async def test_llm_decomposer_falls_back_to_the_rules(server: ModelServer, reply: Reply) -> None:
    server.replies[CHAT] = reply
    rules = Rules()
    model = ChatDecomposer(ChatModel(endpoint(server, CHAT), "m", 64), timeout_s=5.0)
    trace = ModelTrace()
    try:
        with tracing(trace):
            parts = await FallbackDecomposer(model, rules, timeout_s=0.3).decompose(
                "q", conversation_rules()
            )
    finally:
        await model.close()
    assert parts == ["rule part"]
    assert rules.calls == ["q"]
    assert (trace.ran, trace.failed, trace.degraded) == ([], ["decompose"], ["decompose"])


async def test_llm_decomposer_reports_that_it_ran(server: ModelServer) -> None:
    server.replies[CHAT] = chat('["Sarah dance", "Jon dance"]')
    rules = Rules()
    model = ChatDecomposer(ChatModel(endpoint(server, CHAT), "m", 64))
    trace = ModelTrace()
    try:
        with tracing(trace):
            parts = await FallbackDecomposer(model, rules, timeout_s=2.0).decompose(
                "q", conversation_rules()
            )
    finally:
        await model.close()
    assert parts == ["Sarah dance", "Jon dance"]
    assert rules.calls == []
    assert (trace.ran, trace.failed) == (["decompose"], [])


# --- the reranker ----------------------------------------------------------------------------


async def test_reranker_reads_cohere_results_in_any_order(server: ModelServer) -> None:
    server.replies[RERANK] = Reply(
        {
            "id": "x",
            "results": [
                {"index": 2, "relevance_score": 0.9},
                {"index": 0, "relevance_score": 0.1},
                {"index": 1, "relevance_score": 0.5},
            ],
        }
    )
    rr = HttpReranker(endpoint(server, RERANK), "bge-reranker")
    try:
        assert await rr.score("q", ["a", "b", "c"]) == [0.1, 0.5, 0.9]
    finally:
        await rr.close()
    (req,) = server.requests
    assert req.body == {
        "query": "q",
        "documents": ["a", "b", "c"],
        "model": "bge-reranker",
        "top_n": 3,  # Cohere and Jina return only their top few otherwise
    }


async def test_reranker_speaks_tei(server: ModelServer) -> None:
    server.replies[RERANK] = Reply([{"index": 1, "score": 0.7}, {"index": 0, "score": -2.5}])
    rr = HttpReranker(endpoint(server, RERANK), "", documents_field="texts")
    try:
        assert await rr.score("q", ["a", "b"]) == [-2.5, 0.7]
    finally:
        await rr.close()
    assert server.requests[0].body == {"query": "q", "texts": ["a", "b"]}


@pytest.mark.parametrize(
    "reply",
    [
        Reply({"error": "boom"}, status=500),
        Reply(b"]]", status=200),
        Reply({"results": [{"index": 0, "relevance_score": 0.3}]}),  # one of two scored
        Reply({"results": [{"index": 5, "relevance_score": 0.3}]}),
        Reply({"results": [{"index": 0}, {"index": 1}]}),
        Reply({"results": [{"index": 0, "score": "NaN"}, {"index": 1, "score": 1}]}),
        Reply({"results": "nope"}),
        Reply(chat("x").body, delay=1.0),
    ],
)
async def test_reranker_failures_are_unavailable(server: ModelServer, reply: Reply) -> None:
    server.replies[RERANK] = reply
    rr = HttpReranker(endpoint(server, RERANK, timeout_s=0.3), "m")
    try:
        with pytest.raises(Unavailable):
            await rr.score("q", ["a", "b"])
    finally:
        await rr.close()


async def test_reranker_asks_nothing_for_no_documents(server: ModelServer) -> None:
    rr = HttpReranker(endpoint(server, RERANK), "m")
    try:
        assert await rr.score("q", []) == []
    finally:
        await rr.close()
    assert server.requests == []


# --- through the gateway ---------------------------------------------------------------------

A = "0190f3a4-7b1c-7d2e-8f00-00000000000a"
B = "0190f3a4-7b1c-7d2e-8f00-00000000000b"
C = "0190f3a4-7b1c-7d2e-8f00-00000000000c"


def _settings(h: Any, server: ModelServer, **kw: Any) -> Any:
    base: dict[str, Any] = {
        "hyde": {"base_url": server.base_url, "model": "chat", "timeout_s": 0.5},
        "reranker": {"base_url": server.base_url, "model": "ce", "timeout_s": 0.5},
        "recall_cache_ttl_s": 0,
    }
    base.update(kw)
    return h.settings_with(**base)


@pytest.fixture
async def wired(harness: Any, server: ModelServer) -> AsyncIterator[Any]:
    """The harness's gateway with HTTP models pointed at the fake server."""
    h = harness
    h.world.put(
        h.memory(A, "Sarah drinks green tea every morning"),
        h.memory(B, "The tea shop on the corner opened in May"),
        h.memory(C, "Sarah flew to Lisbon for a tea festival"),
    )
    h.settings = _settings(h, server)
    models = build_models(h.settings)
    h.gateway = build_gateway(
        h.settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    try:
        yield h
    finally:
        await models.close()


async def _recall(h: Any, query: str = "where did sarah drink tea", **kw: Any) -> RecallResult:
    return await h.recall(query, **kw)


def _searched(h: Any, backend: str) -> list[str]:
    calls = getattr(h, backend).calls
    return [arg[0] for op, arg in calls if op == "search" and arg[1].start is None]


async def test_hyde_feeds_the_vector_stream_only(wired: Any, server: ModelServer) -> None:
    h = wired
    server.replies[CHAT] = chat("Sarah had tea at the Lisbon festival")
    result = await _recall(h, hyde=True)
    assert result.models == ("hyde",)
    assert result.models_failed == ()
    assert not {"hyde", "rerank"} & set(result.degraded)  # other steps may degrade
    (dense,) = _searched(h, "vector")
    assert dense.endswith("\nSarah had tea at the Lisbon festival")
    assert "Lisbon" not in _searched(h, "lexical")[0]
    assert server.requests[0].body["messages"][1]["content"] == "where did sarah drink tea"
    # The hypothesis found the festival memory through the vector stream.
    assert C in {s.memory.id for s in result.results}


@pytest.mark.parametrize(
    "reply",
    [Reply({"e": 1}, status=500), Reply(b"garbage"), Reply(chat("x").body, delay=2.0)],
)
async def test_hyde_failure_leaves_the_recall_whole(
    wired: Any, server: ModelServer, reply: Reply
) -> None:
    h = wired
    server.replies[CHAT] = reply
    without = await _recall(h)
    result = await _recall(h, hyde=True)
    assert result.models == ()
    assert result.models_failed == ("hyde",)
    assert "hyde" in result.degraded
    assert [s.memory.id for s in result.results] == [s.memory.id for s in without.results]
    assert "\n" not in _searched(h, "vector")[-1]  # the plain query was embedded


def _by_content(scores: dict[str, float]) -> Callable[[Any], Reply]:
    """A cross-encoder whose score for a document is looked up by a word in it."""

    def reply(body: Any) -> Reply:
        results = [
            {"index": i, "relevance_score": next(v for k, v in scores.items() if k in doc)}
            for i, doc in enumerate(body["documents"])
        ]
        return Reply({"results": results})

    return reply


@pytest.mark.parametrize(
    ("mode", "weight", "order", "top_mix"),
    [
        # Fused: A and C tie, B last; cross: B 9, A 1, C 0 (min-max: 1, 1/9, 0).
        ("blend", 0.5, [A, C, B], 0.5 + 0.5 / 9),  # B's mix only ties C's (0.5)
        ("blend", 0.8, [B, A, C], 0.8),
        ("replace", 0.0, [B, A, C], 1.0),
    ],
)
async def test_rerank_reorders_the_top(
    wired: Any, server: ModelServer, mode: str, weight: float, order: list[str], top_mix: float
) -> None:
    h = wired
    before = await _recall(h, query="sarah tea")
    assert [s.memory.id for s in before.results] == [A, C, B]
    lo, hi = before.results[-1].score, before.results[0].score
    assert lo < hi
    rerank = {
        "base_url": server.base_url,
        "mode": mode,
        "weight": weight,
        "timeout_s": 0.5,
        "preceding_chars": 0,  # each memory's content alone, as _by_content reads it
    }
    settings = _settings(h, server, reranker=rerank)
    models = build_models(settings)
    gw = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    server.replies[RERANK] = _by_content({"shop": 9.0, "morning": 1.0, "Lisbon": 0.0})
    try:
        after = await gw.reader.recall(
            h.tenant, RecallRequest(query="sarah tea", rerank=True), Deadline.within(5.0)
        )
    finally:
        await models.close()
    assert after.models == ("rerank",)
    assert [s.memory.id for s in after.results] == order
    assert {s.memory.id: s.components["rerank"] for s in after.results} == {
        A: 1.0,
        B: 9.0,
        C: 0.0,
    }
    # Scores stay on the fused scale, within the re-scored head's range.
    assert all(lo <= s.score <= hi for s in after.results)
    assert after.results[0].score == pytest.approx(lo + (hi - lo) * top_mix)
    (req,) = server.of(RERANK)
    assert req.body["query"] == "sarah tea"
    assert len(req.body["documents"]) == 3


@pytest.mark.parametrize(
    "reply",
    [
        Reply({"e": 1}, status=500),
        Reply(b"{"),
        Reply({"results": [{"index": 0, "relevance_score": 1.0}]}),
        Reply({"results": []}, delay=2.0),
    ],
)
async def test_rerank_failure_keeps_the_fused_order(
    wired: Any, server: ModelServer, reply: Reply
) -> None:
    h = wired
    server.replies[RERANK] = reply
    before = await _recall(h, query="sarah tea")
    after = await _recall(h, query="sarah tea", rerank=True)
    assert after.models_failed == ("rerank",)
    assert "rerank" in after.degraded
    assert [(s.memory.id, s.score) for s in after.results] == [
        (s.memory.id, s.score) for s in before.results
    ]


async def test_both_models_in_one_recall(wired: Any, server: ModelServer) -> None:
    h = wired
    server.replies[CHAT] = chat("a hypothetical festival")
    server.replies[RERANK] = Reply({"e": 1}, status=503)
    result = await _recall(h, query="sarah tea", hyde=True, rerank=True)
    assert result.models == ("hyde",)
    assert result.models_failed == ("rerank",)


async def test_setting_enabled_is_the_default_and_a_request_can_turn_it_off(
    harness: Any, server: ModelServer
) -> None:
    h = harness
    h.world.put(h.memory(A, "Sarah drinks green tea"))
    settings = _settings(
        h, server, hyde={"base_url": server.base_url, "enabled": True, "timeout_s": 0.5}
    )
    models = build_models(settings)
    h.gateway = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    server.replies[CHAT] = chat("hypothesis")
    try:
        assert (await _recall(h)).models == ("hyde",)
        assert (await _recall(h, hyde=False)).models == ()
    finally:
        await models.close()
    assert len(server.of(CHAT)) == 1


async def test_a_model_that_is_not_configured_is_reported_not_degraded(harness: Any) -> None:
    h = harness
    h.world.put(h.memory(A, "Sarah drinks green tea"))  # the harness's gateway has no models
    result = await _recall(h, query="sarah tea", hyde=True, rerank=True)
    assert result.models == ()
    assert result.models_failed == ("hyde", "rerank")
    assert not {"hyde", "rerank"} & set(result.degraded)  # other steps may degrade
    assert [s.memory.id for s in result.results] == [A]


async def test_hyde_for_queries_without_a_query_reads_the_first(
    wired: Any, server: ModelServer
) -> None:
    h = wired
    server.replies[CHAT] = chat("hypothesis")
    result = await _recall(h, query="", queries=["sarah tea", "lisbon"], hyde=True)
    assert result.models == ("hyde",)
    [asked] = server.of(CHAT)
    assert asked.body["messages"][1]["content"] == "sarah tea"


async def test_trending_asks_no_model(wired: Any, server: ModelServer) -> None:
    h = wired
    result = await _recall(h, query="*", hyde=True, rerank=True)
    assert server.requests == []
    assert result.models == ()
    assert result.models_failed == ()


def _decomposing(h: Any, server: ModelServer) -> Any:
    model = {"base_url": server.base_url, "enabled": True, "timeout_s": 0.5}
    settings = _settings(h, server, decompose_model=model)
    return settings, build_models(settings)


async def test_llm_decomposition_feeds_multi_query(harness: Any, server: ModelServer) -> None:
    h = harness
    h.world.put(
        h.memory(A, "Sarah went dancing on Friday"),
        h.memory(B, "Jon took salsa lessons"),
    )
    settings, models = _decomposing(h, server)
    gw = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    server.replies[CHAT] = chat('["Sarah dancing", "Jon salsa lessons"]')
    try:
        result = await gw.reader.recall(
            h.tenant,
            RecallRequest(query="did they both like to dance", decompose=True),
            Deadline.within(5.0),
        )
    finally:
        await models.close()
    assert result.models == ("decompose",)
    lexical = _searched(h, "lexical")
    assert "Sarah dancing" in lexical
    assert "Jon salsa lessons" in lexical
    assert {s.memory.id for s in result.results} == {A, B}


async def test_llm_decomposition_failure_falls_back_to_the_rules(
    harness: Any, server: ModelServer
) -> None:
    h = harness
    h.world.put(h.memory(A, "Sarah went dancing"), h.memory(B, "Jon went dancing"))
    settings, models = _decomposing(h, server)
    gw = build_gateway(
        settings, Backends(h.vector, h.lexical, h.graph, h.ranker), h.log, h.cache, models=models
    )
    server.replies[CHAT] = Reply({"error": "down"}, status=502)
    try:
        result = await gw.reader.recall(
            h.tenant,
            RecallRequest(query="Did Sarah and Jon both go dancing?", decompose=True),
            Deadline.within(5.0),
        )
    finally:
        await models.close()
    assert result.models == ()
    assert result.models_failed == ("decompose",)
    assert "decompose" in result.degraded
    # The rules split the two names instead.
    assert len(_searched(h, "lexical")) > 1
    assert {s.memory.id for s in result.results} == {A, B}


# --- over gRPC -------------------------------------------------------------------------------


@pytest.fixture
async def grpc_client(wired: Any) -> AsyncIterator[Any]:
    auth = Authenticator.from_sources(wired.settings.tokens.get_secret_value())
    running = await gateway_server.start(wired.settings, wired.gateway, auth)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield gateway_pb2_grpc.MemoryServiceStub(channel)
    finally:
        await channel.close()
        await wired.gateway.access.drain()
        await running.stop(None)


async def test_models_over_grpc(grpc_client: Any, server: ModelServer) -> None:
    server.replies[CHAT] = chat("a hypothetical festival")
    server.replies[RERANK] = Reply({"e": 1}, status=500)
    auth = (("authorization", "Bearer rw-token"),)
    reply = await grpc_client.Recall(
        gateway_pb2.RecallRequest(query="sarah tea", hyde=True, rerank=True), metadata=auth
    )
    assert list(reply.models) == ["hyde"]
    assert list(reply.models_failed) == ["rerank"]
    assert "rerank" in reply.degraded
    assert len(reply.results) == 3
    # Unset flags take the settings' defaults (off): no model is asked.
    asked = len(server.requests)
    plain = await grpc_client.Recall(gateway_pb2.RecallRequest(query="sarah tea"), metadata=auth)
    assert list(plain.models) == []
    assert list(plain.models_failed) == []
    assert len(server.requests) == asked
