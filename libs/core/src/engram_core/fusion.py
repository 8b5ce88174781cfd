"""Learned fusion: a logistic model over what each ranked candidate already carries.

The hand-set weights of ``engram_core.scoring`` sum the components; a learned fusion
reads the same components, the hand-set score itself and the streams' ranks, and scores
a candidate by ``sigmoid(bias + Σ weight × feature)`` — the model's estimate that the
candidate is what the query asks for. A feature is a base name (``FEATURES``) or the
product of two (``"keyword*label"``). The model is a small JSON file named by a profile
and checked when it is read: a file naming a feature that does not exist is refused with
its path, so a service never starts on a model it cannot evaluate.

Pure: no I/O except ``load``, which reads one file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

FORMAT = "engram.fusion.logistic/1"
PRODUCT = "*"
HANDSET = "handset"  # the hand-set weighted score, context included
_RECIPROCAL_RANK = "rr_"  # rr_<stream>: 1 / the stream's rank, 0 when it did not return it


class BadModel(ValueError):
    """A learned fusion file that cannot be used; the message names the file."""


Feature = Callable[[Mapping[str, float], Mapping[str, int], float], float]


def _component(name: str) -> Feature:
    return lambda components, ranks, handset: components.get(name, 0.0)


def _reciprocal_rank(stream: str) -> Feature:
    def value(components: Mapping[str, float], ranks: Mapping[str, int], handset: float) -> float:
        r = ranks.get(stream, 0)
        return 1.0 / r if r >= 1 else 0.0

    return value


def base_features(components: Sequence[str], streams: Sequence[str]) -> dict[str, Feature]:
    """Every base feature: each component by its name, ``handset``, ``rr_<stream>``."""
    out: dict[str, Feature] = {name: _component(name) for name in components}
    out[HANDSET] = lambda components, ranks, handset: handset
    for s in streams:
        out[f"{_RECIPROCAL_RANK}{s}"] = _reciprocal_rank(s)
    return out


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)  # no overflow for a very negative x
    return e / (1.0 + e)


@dataclass(frozen=True, slots=True)
class LearnedFusion:
    """``sigmoid(bias + Σ weight × term)``, a term being one base feature or two multiplied.

    ``bases`` are the distinct base features the terms read, each computed once per
    candidate; a term is (weight, index of a base, index of another base or -1).
    """

    bases: tuple[Feature, ...]
    terms: tuple[tuple[float, int, int], ...]
    bias: float
    source: str = ""  # where it was read from, for messages

    def score(
        self, components: Mapping[str, float], ranks: Mapping[str, int], handset: float
    ) -> float:
        values = [f(components, ranks, handset) for f in self.bases]
        total = self.bias
        for w, i, j in self.terms:
            total += w * values[i] * (values[j] if j >= 0 else 1.0)
        return _sigmoid(total)


def parse(data: Any, known: Mapping[str, Feature], source: str) -> LearnedFusion:
    """A model from its JSON form; BadModel naming ``source`` when it is not one."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise BadModel(f"{source}: not a learned fusion model (format must be {FORMAT!r})")
    weights = data.get("weights")
    bias = data.get("bias")
    if not isinstance(weights, Mapping) or not weights:
        raise BadModel(f"{source}: 'weights' must map feature names to numbers")
    if not _number(bias):
        raise BadModel(f"{source}: 'bias' must be a finite number")
    index: dict[str, int] = {}
    terms: list[tuple[float, int, int]] = []
    for name, w in weights.items():
        parts = str(name).split(PRODUCT)
        if len(parts) > 2 or any(p not in known for p in parts):
            raise BadModel(
                f"{source}: unknown feature {name!r}; known: {', '.join(sorted(known))}"
                f" and products of two ('a{PRODUCT}b')"
            )
        if not _number(w):
            raise BadModel(f"{source}: the weight of {name!r} must be a finite number")
        at = [index.setdefault(p, len(index)) for p in parts]
        terms.append((float(w), at[0], at[1] if len(at) > 1 else -1))
    return LearnedFusion(
        bases=tuple(known[n] for n in index), terms=tuple(terms), bias=float(bias), source=source
    )


def _number(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def load(path: Path, known: Mapping[str, Feature]) -> LearnedFusion:
    """The model in ``path``; BadModel naming the file when it is missing or wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadModel(f"{path}: cannot read a learned fusion model: {exc}") from exc
    return parse(data, known, str(path))
