"""An OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, llama.cpp, TEI...)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from engram_core.errors import Unavailable

log = logging.getLogger(__name__)


class OpenAICompatibleEmbedder:
    """POSTs ``{base_url}/embeddings``; every failure is reported as Unavailable.

    The API key is read once from a file (a mounted secret), never from settings.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dimension: int,
        *,
        api_key_file: Path | None = None,
        timeout_s: float = 30.0,
        batch_size: int = 64,
        query_instruction: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        headers = {}
        if api_key_file is not None:
            try:
                key = api_key_file.read_text().strip()
            except OSError as e:
                raise Unavailable(f"cannot read embedding API key file {api_key_file}: {e}") from e
            if not key:
                raise Unavailable(f"embedding API key file {api_key_file} is empty")
            headers["Authorization"] = f"Bearer {key}"
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._query_instruction = query_instruction
        self._url = base_url.rstrip("/") + "/embeddings"
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s, transport=transport)

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def query_instruction(self) -> str:
        return self._query_instruction

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(await self._post(list(texts[start : start + self._batch_size])))
        return out

    async def close(self) -> None:
        await self._client.aclose()

    async def _post(self, batch: list[str]) -> list[list[float]]:
        try:
            resp = await self._client.post(self._url, json={"model": self._model, "input": batch})
        except httpx.HTTPError as e:
            raise Unavailable(f"embedding service {self._url}: {type(e).__name__}: {e}") from e
        if resp.status_code != 200:
            # The body may say why (quota, unknown model) but may also echo the input (a
            # validation error quoting it): it goes to DEBUG only, as the message is logged.
            log.debug("embedding service %s body: %.200s", self._url, resp.text)
            raise Unavailable(f"embedding service {self._url} answered {resp.status_code}")
        try:
            return self._parse(resp.json(), len(batch))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise Unavailable(f"embedding service {self._url} sent a bad response: {e}") from e

    def _parse(self, body: Any, expected: int) -> list[list[float]]:
        data = body["data"]
        if len(data) != expected:
            raise ValueError(f"{len(data)} embeddings for {expected} inputs")
        # The API does not promise order; each item carries its input's index.
        vecs: list[list[float]] = [[] for _ in range(expected)]
        for i, item in enumerate(data):
            vecs[int(item.get("index", i))] = [float(x) for x in item["embedding"]]
        for vec in vecs:
            if len(vec) != self._dimension:
                raise ValueError(f"got {len(vec)} dimensions, configured {self._dimension}")
        # Not every server normalises; the port promises unit length.
        return [_unit(v) for v in vecs]


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        raise ValueError("zero vector")
    return [x / norm for x in vec]
