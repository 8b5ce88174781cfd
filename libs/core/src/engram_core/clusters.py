"""Clusters: near-duplicates and themes → one MetaPattern memory each. Pure.

1. ``find_clusters`` groups memories from the neighbour lists the caller got from the
   vector service — (id, neighbour, cosine) triples, so the cost is that of the pairs,
   never all pairs of a tenant: union-find over the pairs with cosine ≥ ``min_cosine``.
   Single linkage chains (A~B, B~C puts A with C though A and C may differ), so a
   component larger than ``max_size`` is split by re-running on its own pairs with the
   threshold raised by ``split_step`` until every part fits. Components smaller than
   ``min_size`` are dropped. Output is sorted and independent of input order.
2. ``assign_keys`` gives each cluster the id of its MetaPattern memory, stable across
   runs: a cluster inherits the id of the previous MetaPattern whose members
   (SUMMARIZES edges) overlap it most (Jaccard ≥ ``min_jaccard``, greedy, each previous
   id used once); otherwise the id is derived from the tenant and the cluster's
   smallest member id (UUIDv7 ids grow with time, so that is its oldest member and
   stays while the cluster grows). Re-running therefore rewrites the same memories.
   Previous MetaPatterns no cluster inherits are returned as retired.
3. ``summarise`` writes the MetaPattern's text without a model: the keywords most
   members share, then the sentences that share most of them (extractive).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engram_core.model import META_PATTERN, Memory, Relation
from engram_core.relations import ORIGIN_SYSTEM, RelationType
from engram_core.scoring import normalise_text, tokens
from engram_core.tags import tag_prefixes

# Fixed forever: MetaPattern ids derived from it must not change between releases.
_META_NAMESPACE = uuid.UUID("0b6b5f3e-6c1a-5d8e-9a47-3f2c1d9e8b70")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Common English words that would otherwise top every theme's keyword list.
STOPWORDS: frozenset[str] = frozenset(
    {
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "all",
        "any",
        "can",
        "had",
        "her",
        "was",
        "one",
        "our",
        "out",
        "has",
        "his",
        "how",
        "its",
        "may",
        "new",
        "now",
        "old",
        "see",
        "two",
        "way",
        "who",
        "did",
        "get",
        "got",
        "let",
        "say",
        "she",
        "too",
        "use",
        "that",
        "with",
        "have",
        "this",
        "will",
        "your",
        "from",
        "they",
        "been",
        "were",
        "what",
        "when",
        "which",
        "their",
        "there",
        "would",
        "about",
        "could",
        "other",
        "into",
        "than",
        "then",
        "them",
        "these",
        "some",
        "also",
        "just",
        "like",
        "only",
        "over",
        "such",
        "very",
        "more",
        "most",
        "much",
        "many",
        "should",
        "after",
        "before",
        "because",
        "being",
        "both",
        "each",
        "does",
        "doing",
        "while",
        "where",
        "here",
        "those",
    }
)


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    min_cosine: float = field(
        default=0.92,
        metadata={
            "description": "Least cosine linking two memories of a cluster. Depends on the "
            "embedding model: 0.92 for bge-small-en-v1.5 (the default), 0.85 for "
            "all-MiniLM-L6-v2."
        },
    )
    min_size: int = field(
        default=3, metadata={"description": "Fewest members for a cluster to get a MetaPattern."}
    )
    max_size: int = field(
        default=50,
        metadata={"description": "Larger components are split by raising the threshold."},
    )
    split_step: float = field(
        default=0.02, metadata={"description": "Threshold increase per split round."}
    )
    min_jaccard: float = field(
        default=0.5,
        metadata={"description": "Least member overlap to inherit a previous MetaPattern's id."},
    )
    summary_keywords: int = field(
        default=8, metadata={"description": "Keywords listed in a MetaPattern summary."}
    )
    summary_sentences: int = field(
        default=3, metadata={"description": "Member sentences quoted in a summary."}
    )
    summary_max_chars: int = field(default=1200, metadata={"description": "Longest summary text."})
    tag_min_share: float = field(
        default=0.5,
        metadata={"description": "A tag carried by at least this share of members is copied."},
    )

    def __post_init__(self) -> None:
        for name in ("min_cosine", "min_jaccard", "tag_min_share"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if not (math.isfinite(self.split_step) and self.split_step > 0):
            raise ValueError("split_step must be > 0")
        if not 2 <= self.min_size <= self.max_size:
            raise ValueError("need 2 <= min_size <= max_size")
        if min(self.summary_keywords, self.summary_sentences) < 0 or self.summary_max_chars < 80:
            raise ValueError("summary sizes must be >= 0 and summary_max_chars >= 80")


_DEFAULTS = ClusterSettings()  # built once: the checks in __post_init__ are not free


@dataclass(frozen=True, slots=True)
class Pair:
    """Two memories the vector service found similar (either order; self-pairs ignored)."""

    a: str
    b: str
    cosine: float


@dataclass(frozen=True, slots=True)
class Cluster:
    members: tuple[str, ...]  # sorted ids
    strength: Mapping[str, float]  # member → its best cosine inside the cluster
    threshold: float  # the cosine it was cut at (higher when split from a larger one)


# --- grouping ----------------------------------------------------------------------------


def _components(
    nodes: Iterable[str], pairs: Sequence[Pair], threshold: float
) -> list[tuple[list[str], list[Pair]]]:
    """Connected components over the pairs at or above ``threshold``, each with its pairs."""
    parent: dict[str, str] = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    kept = [p for p in pairs if p.cosine >= threshold]
    for p in kept:
        ra, rb = find(p.a), find(p.b)
        if ra != rb:
            # The smaller id becomes the root: the result does not depend on pair order.
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, tuple[list[str], list[Pair]]] = {}
    for n in parent:
        groups.setdefault(find(n), ([], []))[0].append(n)
    for p in kept:
        groups[find(p.a)][1].append(p)
    return [(sorted(members), inside) for members, inside in groups.values()]


def find_clusters(pairs: Iterable[Pair], settings: ClusterSettings | None = None) -> list[Cluster]:
    """Clusters of at least ``min_size`` and at most ``max_size`` members, sorted by
    smallest member id."""
    s = settings or _DEFAULTS
    linked = [
        Pair(min(p.a, p.b), max(p.a, p.b), p.cosine)
        for p in pairs
        if p.a != p.b and math.isfinite(p.cosine) and p.cosine >= s.min_cosine
    ]
    nodes = sorted({i for p in linked for i in (p.a, p.b)})
    out: list[Cluster] = []
    pending: list[tuple[list[str], list[Pair], float]] = [(nodes, linked, s.min_cosine)]
    while pending:
        group_nodes, group_pairs, threshold = pending.pop()
        for members, inside in _components(group_nodes, group_pairs, threshold):
            if len(members) < s.min_size:
                continue
            if len(members) > s.max_size:
                # Terminates: the threshold rises past every cosine, leaving singletons.
                pending.append((members, inside, threshold + s.split_step))
                continue
            strength: dict[str, float] = {}
            for p in inside:
                for m in (p.a, p.b):
                    strength[m] = max(strength.get(m, 0.0), min(1.0, p.cosine))
            out.append(Cluster(tuple(members), strength, threshold))
    return sorted(out, key=lambda c: c.members[0])


# --- stable keys --------------------------------------------------------------------------


def meta_pattern_id(tenant: str, seed_member: str) -> str:
    """The MetaPattern id derived from a member id (a UUID, as memory ids must be)."""
    return str(uuid.uuid5(_META_NAMESPACE, f"{tenant}\x1f{seed_member}"))


@dataclass(frozen=True, slots=True)
class KeyedCluster:
    meta_id: str
    cluster: Cluster
    inherited: bool  # the id of a previous MetaPattern
    changed: bool  # members differ from that previous MetaPattern's (or it is new)


@dataclass(frozen=True, slots=True)
class Assignment:
    clusters: tuple[KeyedCluster, ...]
    retired: tuple[str, ...]  # previous MetaPattern ids no cluster inherits


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def assign_keys(
    tenant: str,
    clusters: Sequence[Cluster],
    previous: Mapping[str, Iterable[str]],
    settings: ClusterSettings | None = None,
) -> Assignment:
    """MetaPattern ids for ``clusters`` given ``previous`` (MetaPattern id → its members,
    read from its SUMMARIZES edges)."""
    s = settings or _DEFAULTS
    before = {k: frozenset(v) for k, v in previous.items()}
    sets = [frozenset(c.members) for c in clusters]
    # Every (cluster, previous) pair that shares a member, best overlap first.
    scored = sorted(
        (-_jaccard(sets[i], members), i, key)
        for i in range(len(clusters))
        for key, members in before.items()
        if sets[i] & members
    )
    chosen: dict[int, str] = {}
    taken: set[str] = set()
    for neg, i, key in scored:
        if -neg >= s.min_jaccard and i not in chosen and key not in taken:
            chosen[i] = key
            taken.add(key)
    for i, c in enumerate(clusters):
        if i in chosen:
            continue
        for seed in c.members:
            candidate = meta_pattern_id(tenant, seed)
            if candidate not in taken:
                # An unclaimed previous id derived the same way is simply reused (updated).
                chosen[i] = candidate
                taken.add(candidate)
                break
    keyed = tuple(
        KeyedCluster(
            meta_id=chosen[i],
            cluster=c,
            inherited=chosen[i] in before,
            changed=before.get(chosen[i]) != sets[i],
        )
        for i, c in enumerate(clusters)
        if i in chosen
    )
    retired = tuple(sorted(k for k in before if k not in taken))
    return Assignment(keyed, retired)


# --- summaries ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    keywords: tuple[str, ...]
    tags: tuple[str, ...]  # tags at least tag_min_share of the members carry


def _sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in _SENTENCE_END.split(text) if s.strip()]


def _terms(text: str) -> frozenset[str]:
    return frozenset(t for t in tokens(text) if t not in STOPWORDS and not t.isdigit())


def summarise(members: Sequence[Memory], settings: ClusterSettings | None = None) -> Summary:
    """An extractive summary of ``members`` (order does not matter)."""
    s = settings or _DEFAULTS
    ordered = sorted(members, key=lambda m: m.id)
    n = len(ordered)
    df: dict[str, int] = {}
    for m in ordered:
        for t in _terms(m.content):
            df[t] = df.get(t, 0) + 1
    shared = sorted((t for t, k in df.items() if k >= 2 or n == 1), key=lambda t: (-df[t], t))
    keywords = tuple(shared[: s.summary_keywords])

    # A sentence scores by the members that share its words (df - 1: a word only it has
    # adds nothing), normalised by sqrt(length) so long sentences do not win by size.
    ranked: list[tuple[float, int, int, str]] = []
    for mi, m in enumerate(ordered):
        for si, sentence in enumerate(_sentences(m.content)):
            terms = _terms(sentence)
            if not terms:
                continue
            score = sum(df[t] - 1 for t in terms) / math.sqrt(len(terms))
            if score > 0 or n == 1:  # a sentence sharing nothing says nothing of the theme
                ranked.append((-score, mi, si, sentence))
    ranked.sort()
    picked: list[str] = []
    seen: list[frozenset[str]] = []
    for _, _, _, sentence in ranked:
        if len(picked) >= s.summary_sentences:
            break
        terms = _terms(sentence)
        if any(_jaccard(terms, other) >= 0.8 for other in seen):
            continue  # near-duplicates say the same thing once
        picked.append(sentence)
        seen.append(terms)

    counts: dict[str, int] = {}
    for m in ordered:
        for t in set(m.tags):
            counts[t] = counts.get(t, 0) + 1
    tags = tuple(sorted(t for t, k in counts.items() if k >= s.tag_min_share * n))

    head = f"Theme of {n} memories"
    head += f": {', '.join(keywords)}." if keywords else "."
    text = "\n".join([head, *(f"- {p}" for p in picked)])
    if len(text) > s.summary_max_chars:
        text = text[: s.summary_max_chars - 1].rstrip() + "…"
    return Summary(text, keywords, tags)


def meta_pattern(
    tenant: str,
    keyed: KeyedCluster,
    members: Sequence[Memory],
    summary: Summary,
    now: datetime,
) -> tuple[Memory, list[Relation]]:
    """The MetaPattern memory of a cluster and its SUMMARIZES edges (MetaPattern → member,
    strength = the member's best cosine in the cluster). Importance is the members'
    highest, confidence their mean; ``timestamp`` is the newest member's, so the summary
    ages with its theme. Version and embedding are the caller's to add."""
    ids = set(keyed.cluster.members)
    held = [m for m in members if m.id in ids]
    memory = Memory(
        id=keyed.meta_id,
        tenant=tenant,
        content=summary.text,
        type=META_PATTERN,
        tags=summary.tags,
        tag_prefixes=tag_prefixes(summary.tags),
        importance=max((m.importance for m in held), default=0.5),
        confidence=sum(m.confidence for m in held) / len(held) if held else 0.5,
        metadata={
            "cluster": {
                "size": len(keyed.cluster.members),
                "keywords": list(summary.keywords),
                "threshold": round(keyed.cluster.threshold, 4),
            }
        },
        timestamp=max((m.timestamp for m in held), default=now),
        updated_at=now,
    )
    edges = [
        Relation(
            source_id=keyed.meta_id,
            target_id=member,
            type=RelationType.SUMMARIZES.value,
            strength=keyed.cluster.strength.get(member, 1.0),
            properties={"rule": "cluster"},
            origin=ORIGIN_SYSTEM,
            created_at=now,
        )
        for member in keyed.cluster.members
    ]
    return memory, edges


def summary_unchanged(old: Memory | None, new_text: str) -> bool:
    """True when the stored MetaPattern already says ``new_text`` (skip the re-embed)."""
    return old is not None and normalise_text(old.content) == normalise_text(new_text)
