"""Query-side models over HTTP: HyDE and query decomposition through an
OpenAI-compatible ``/chat/completions`` endpoint, and a cross-encoder behind ``/rerank``
(the Cohere/Jina/vLLM/llama.cpp shape; TEI's native one with ``documents_field="texts"``).

Every failure — connection, timeout, a status other than 200, a body that does not parse —
is raised as ``Unavailable``; the read path turns that into a recall without the model.
The HTTP plumbing mirrors ``engram_embed.http.OpenAICompatibleEmbedder`` (key read once
from a file, one pooled client, error bodies at DEBUG only).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from engram_core.entities import EntityRules
from engram_core.errors import Unavailable

log = logging.getLogger(__name__)

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")

HYDE_PROMPT = (
    "You write the memory an assistant would have stored if it knew the answer to the "
    "user's question: two to four plain sentences with the concrete names, dates and facts "
    "such a memory would hold. Invent plausible details rather than saying you do not "
    "know. Answer with the passage only."
)
DECOMPOSE_PROMPT = (
    "Split the user's question into at most {n} short, self-contained search queries: one "
    "per person, thing, topic or reasoning step needed to answer it. Answer with a JSON "
    "list of strings only, or [] when the question needs no splitting."
)


def read_api_key(path: Path | None, what: str) -> dict[str, str]:
    """The Authorization header from a key file (a mounted secret); none without a file."""
    if path is None:
        return {}
    try:
        key = path.read_text().strip()
    except OSError as e:
        raise Unavailable(f"cannot read {what} API key file {path}: {e}") from e
    if not key:
        raise Unavailable(f"{what} API key file {path} is empty")
    return {"Authorization": f"Bearer {key}"}


class JsonEndpoint:
    """POSTs JSON to ``{base_url}{path}`` and returns the decoded body."""

    def __init__(
        self,
        what: str,
        base_url: str,
        path: str,
        *,
        api_key_file: Path | None = None,
        timeout_s: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.what = what
        self.url = base_url.rstrip("/") + path
        self._timeout = timeout_s
        self._client = httpx.AsyncClient(
            headers=read_api_key(api_key_file, what), timeout=timeout_s, transport=transport
        )

    async def post(self, body: dict[str, Any], timeout: float | None = None) -> Any:
        # The caller's budget may be shorter than the configured timeout, never longer.
        t = self._timeout if timeout is None else min(timeout, self._timeout)
        try:
            resp = await self._client.post(self.url, json=body, timeout=t)
        except httpx.HTTPError as e:
            raise Unavailable(f"{self.what} {self.url}: {type(e).__name__}: {e}") from e
        if resp.status_code != 200:
            # The body may echo the prompt (a validation error quoting its input), and this
            # message is logged: the body goes to DEBUG only.
            log.debug("%s %s body: %.200s", self.what, self.url, resp.text)
            raise Unavailable(f"{self.what} {self.url} answered {resp.status_code}")
        try:
            return resp.json()
        except ValueError as e:
            raise Unavailable(f"{self.what} {self.url} sent a body that is not JSON") from e

    async def close(self) -> None:
        await self._client.aclose()


class ChatModel:
    """One OpenAI-compatible chat model: a system prompt and the user's text in, text out."""

    def __init__(self, endpoint: JsonEndpoint, model: str, max_tokens: int) -> None:
        self._endpoint = endpoint
        self._model = model
        self._max_tokens = max_tokens

    async def complete(self, system: str, user: str, timeout: float | None = None) -> str:
        body = {
            "model": self._model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            # Deterministic: the same query should give the same recall (and cache entry).
            "temperature": 0,
            "max_tokens": self._max_tokens,
        }
        reply = await self._endpoint.post(body, timeout)
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise Unavailable(f"{self._endpoint.what} sent no choices[0].message.content") from e
        if not isinstance(text, str) or not text.strip():
            raise Unavailable(f"{self._endpoint.what} sent an empty completion")
        return text.strip()

    async def close(self) -> None:
        await self._endpoint.close()


class ChatHyde:
    """HyDE: a hypothetical memory that answers the query (Gao et al., 2022)."""

    def __init__(self, chat: ChatModel, max_chars: int = 1000) -> None:
        self._chat = chat
        self._max_chars = max_chars

    async def hypothesise(self, query: str, timeout: float | None = None) -> str:
        text = await self._chat.complete(HYDE_PROMPT, query, timeout)
        # A runaway answer would drown the query in the embedding (and the model's window).
        return text[: self._max_chars]

    async def close(self) -> None:
        await self._chat.close()


class ChatDecomposer:
    """A QueryDecomposer: the model's JSON list of sub-queries."""

    def __init__(self, chat: ChatModel, max_queries: int = 4, timeout_s: float = 5.0) -> None:
        self._chat = chat
        self._max = max_queries
        self._timeout = timeout_s

    async def decompose(self, query: str, rules: EntityRules) -> list[str]:
        text = await self._chat.complete(DECOMPOSE_PROMPT.format(n=self._max), query, self._timeout)
        try:
            parts = parse_queries(text, self._max + 1)
        except ValueError as e:
            raise Unavailable(f"decomposer sent no list of queries: {e}") from e
        # The question itself always runs beside its parts (the port), so it is no part.
        asked = _norm(query)
        return [p for p in parts if _norm(p) != asked][: self._max]

    async def close(self) -> None:
        await self._chat.close()


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip("?.! ")


def parse_queries(text: str, most: int) -> list[str]:
    """Sub-queries from a model's answer: a JSON list of strings (or {"queries": [...]}),
    possibly in a Markdown code fence; blanks and repeats dropped, at most ``most``.
    ValueError when the answer is not such a list."""
    body = json.loads(_FENCE.sub("", text.strip()))
    if isinstance(body, dict):
        body = body.get("queries")
    if not isinstance(body, list) or not all(isinstance(q, str) for q in body):
        raise ValueError("not a list of strings")
    # [] is an answer too: the question needs no split (the port's "no split").
    return list(dict.fromkeys(q.strip() for q in body if q.strip()))[:most]


class HttpReranker:
    """A cross-encoder behind ``/rerank``: one relevance score per document, in input order."""

    def __init__(
        self,
        endpoint: JsonEndpoint,
        model: str,
        documents_field: str = "documents",
    ) -> None:
        self._endpoint = endpoint
        self._model = model
        self._field = documents_field

    async def score(
        self, query: str, documents: Sequence[str], timeout: float | None = None
    ) -> list[float]:
        if not documents:
            return []
        body: dict[str, Any] = {"query": query, self._field: list(documents)}
        if self._model:
            body["model"] = self._model
        if self._field == "documents":
            body["top_n"] = len(documents)  # Cohere/Jina return only the top 3-10 otherwise
        reply = await self._endpoint.post(body, timeout)
        try:
            return parse_scores(reply, len(documents))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise Unavailable(f"reranker sent a bad response: {e}") from e

    async def close(self) -> None:
        await self._endpoint.close()


def parse_scores(reply: Any, expected: int) -> list[float]:
    """``{"results": [{index, relevance_score}]}`` (Cohere, Jina, vLLM, llama.cpp) or TEI's
    bare ``[{index, score}]``; results may come in any order, each names its input."""
    items = reply["results"] if isinstance(reply, dict) else reply
    if not isinstance(items, list):
        raise ValueError("results is not a list")
    scores: list[float | None] = [None] * expected
    for item in items:
        index = int(item["index"])
        if not 0 <= index < expected:
            raise ValueError(f"index {index} out of range for {expected} documents")
        raw = item["relevance_score"] if "relevance_score" in item else item["score"]
        score = float(raw)
        if not math.isfinite(score):  # a NaN would make the order arbitrary
            raise ValueError(f"score {raw!r} is not a finite number")
        scores[index] = score
    if any(s is None for s in scores):
        raise ValueError(f"{sum(s is None for s in scores)} of {expected} documents unscored")
    return [s for s in scores if s is not None]
