"""The local cross-encoder against the model `make models` built (fails, never skips, without)."""

from __future__ import annotations

import asyncio
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_embed import cross
from engram_embed.build import BUILDABLE, build, manifest_is_current
from engram_embed.cross import OnnxCrossEncoder
from engram_embed.paths import RERANKER, default_cache_dir, default_model_dir

pytestmark = pytest.mark.model

QUERY = "where did Sarah drink tea"
PASSAGES = [
    "The quarterly revenue grew five percent.",
    "Sarah drank green tea at a little café in Lisbon every morning.",
    "Tea is a drink.",
]


@cache
def encoder() -> OnnxCrossEncoder:
    return OnnxCrossEncoder(threads=1)


def test_the_built_reranker_is_current_and_buildable() -> None:
    assert RERANKER in BUILDABLE
    assert manifest_is_current(default_model_dir(RERANKER), RERANKER)


def test_the_passage_that_answers_scores_highest() -> None:
    scores = encoder().score_sync(QUERY, PASSAGES)
    assert len(scores) == 3
    assert max(range(3), key=scores.__getitem__) == 1
    assert scores[0] < scores[2]  # on the topic beats off it


def test_a_pair_scores_the_same_whatever_it_is_ranked_with() -> None:
    together = encoder().score_sync(QUERY, PASSAGES)
    alone = [encoder().score_sync(QUERY, [p])[0] for p in reversed(PASSAGES)]
    assert together == list(reversed(alone))


def test_the_async_port_scores_off_the_loop_and_nothing_for_nothing() -> None:
    async def run() -> tuple[list[float], list[float]]:
        return await encoder().score(QUERY, PASSAGES), await encoder().score(QUERY, [])

    scored, empty = asyncio.run(run())
    assert scored == pytest.approx(encoder().score_sync(QUERY, PASSAGES), abs=1e-5)
    assert empty == []


class _CountingSession:
    """The model's session, counting the pairs it scores."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.runs: list[None] = []  # appended from the worker threads

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.runs.append(None)
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def test_a_deadline_stops_the_work_between_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _CountingSession(encoder()._session)
    monkeypatch.setattr(encoder(), "_session", counting)
    with pytest.raises(Unavailable, match="out of time"):
        encoder().score_sync(QUERY, PASSAGES, deadline=time.monotonic() - 1)
    assert counting.runs == []  # past its deadline, no pair starts

    async def late() -> list[float]:
        return await encoder().score(QUERY, PASSAGES * 200, timeout=0.05)

    with pytest.raises(Unavailable, match="out of time"):
        asyncio.run(late())
    assert len(counting.runs) < len(PASSAGES * 200)  # the pairs left once out of time never run


def test_a_missing_model_fails_at_load_with_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="make models"):
        OnnxCrossEncoder(tmp_path)


def test_an_embedding_model_is_not_taken_for_a_cross_encoder(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])
    y = helper.make_tensor_value_info("sentence_embedding", TensorProto.INT64, ["b", "s"])
    node = helper.make_node("Identity", ["input_ids"], ["sentence_embedding"])
    graph = helper.make_graph([node], "g", [x], [y])
    with pytest.raises(SystemExit, match="not a cross-encoder"):
        cross.check_graph(helper.make_model(graph))


def test_a_build_into_a_fresh_folder_copies_the_wheels_files(tmp_path: Path) -> None:
    out = tmp_path / RERANKER
    assert build(out, default_cache_dir(), model=RERANKER)  # the wheel is cached by make models
    assert manifest_is_current(out, RERANKER)
    built = default_model_dir(RERANKER) / "model.onnx"
    assert (out / "model.onnx").read_bytes() == built.read_bytes()
    assert not build(out, default_cache_dir(), model=RERANKER)  # up to date: nothing done
