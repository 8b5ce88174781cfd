import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from engram_core.errors import Unavailable
from engram_embed.http import OpenAICompatibleEmbedder

BASE = "http://embed.test/v1"


def make(
    handler: Callable[[httpx.Request], httpx.Response],
    *,
    key_file: Path | None = None,
    dimension: int = 3,
    batch_size: int = 64,
) -> OpenAICompatibleEmbedder:
    return OpenAICompatibleEmbedder(
        BASE,
        "test-model",
        dimension,
        api_key_file=key_file,
        batch_size=batch_size,
        transport=httpx.MockTransport(handler),
    )


def answer(vectors: list[list[float]], reverse: bool = False) -> httpx.Response:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    if reverse:
        data.reverse()
    return httpx.Response(200, json={"object": "list", "data": data, "model": "test-model"})


async def test_posts_model_and_input_and_returns_unit_vectors_in_order() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        # Out of order and not normalised: the client must fix both.
        return answer([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], reverse=True)

    emb = make(handler)
    vecs = await emb.embed(["first", "second"])
    await emb.close()

    assert vecs == [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]]
    (req,) = seen
    assert req.method == "POST"
    assert str(req.url) == f"{BASE}/embeddings"
    assert json.loads(req.content) == {"model": "test-model", "input": ["first", "second"]}
    assert "authorization" not in req.headers
    assert emb.model_name == "test-model"
    assert emb.dimension == 3


async def test_api_key_is_read_from_the_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-secret\n")
    auth: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        auth.append(request.headers["authorization"])
        return answer([[1.0, 0.0, 0.0]])

    emb = make(handler, key_file=key_file)
    await emb.embed(["x"])
    await emb.close()
    assert auth == ["Bearer sk-secret"]


@pytest.mark.parametrize("content", [None, ""])
def test_missing_or_empty_key_file_is_unavailable(tmp_path: Path, content: str | None) -> None:
    key_file = tmp_path / "key"
    if content is not None:
        key_file.write_text(content)
    with pytest.raises(Unavailable, match=str(key_file)):
        make(lambda r: answer([]), key_file=key_file)


async def test_http_500_is_unavailable() -> None:
    emb = make(lambda r: httpx.Response(500, text="upstream exploded"))
    with pytest.raises(Unavailable, match="answered 500"):
        await emb.embed(["x"])
    await emb.close()


async def test_an_error_body_echoing_the_input_stays_out_of_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A validation error that quotes its input (FastAPI's 422) would put memory content
    # in the message, which the callers log at WARNING.
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": [{"input": json.loads(request.content)}]})

    emb = make(echo)
    with caplog.at_level(logging.DEBUG), pytest.raises(Unavailable) as err:
        await emb.embed(["the private diary entry"])
    await emb.close()
    assert "422" in str(err.value)
    assert "diary" not in str(err.value)
    assert all("diary" not in r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)


async def test_connection_error_is_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    emb = make(handler)
    with pytest.raises(Unavailable, match="ConnectError"):
        await emb.embed(["x"])
    await emb.close()


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>not json</html>"),
        httpx.Response(200, json={"no": "data"}),
        httpx.Response(200, json={"data": []}),
        httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0, 0.0]}]}),
        httpx.Response(200, json={"data": [{"index": 5, "embedding": [1.0, 0.0, 0.0]}]}),
        httpx.Response(200, json={"data": [{"index": 0, "embedding": [0.0, 0.0, 0.0]}]}),
    ],
    ids=["not-json", "no-data", "too-few", "wrong-dimension", "bad-index", "zero-vector"],
)
async def test_malformed_response_is_unavailable(response: httpx.Response) -> None:
    emb = make(lambda r: response)
    with pytest.raises(Unavailable, match="bad response"):
        await emb.embed(["x"])
    await emb.close()


async def test_large_inputs_are_split_into_batches() -> None:
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        inputs = json.loads(request.content)["input"]
        sizes.append(len(inputs))
        return answer([[float(len(t)), 1.0, 0.0] for t in inputs])

    emb = make(handler, batch_size=2)
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vecs = await emb.embed(texts)
    await emb.close()
    assert sizes == [2, 2, 1]
    assert [round(v[0] / v[1]) for v in vecs] == [1, 2, 3, 4, 5]
    assert all(math.isclose(sum(x * x for x in v), 1.0) for v in vecs)
