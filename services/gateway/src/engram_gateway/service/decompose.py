"""Rule-based question decomposition: the default ``QueryDecomposer`` (multi-query recall).

A question whose evidence sits in several memories ("Did Jon and Gina both dance?", "What
worries Andrew besides hiking?") is searched better as one query per part: each part's
memories then compete only with their own kind for a place in the pool. The rules, in order,
each applied to what the one before produced:

1. separate questions and clauses: "…? …", ";", ", and what/when/did …";
2. exceptions: "X besides / other than / apart from / aside from / except Y" → X, and Y with
   the people the question names;
3. coordinated names: "A and B", "A, B or C", "both A and B" (names: ``extract_entities``)
   → the question once per name ("both", "together", "either" dropped); in a comparison
   ("difference between A and B", "A vs B", "which is better, A or B") → "<name> <topic>".

Not a rule: two people without a coordination ("What did Caroline tell Melanie about X?").
Splitting those into "<name> <topic>" per person lost more than it found: the answer is
one turn between the two, and each half brings in the person's other turns.

Pure and deterministic; no model. A question none of the rules splits gives [].
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engram_core.entities import CONCEPTS, PEOPLE, EntityRules, extract_entities
from engram_gateway.service.query import keywords

DEFAULT_MAX_PARTS = 4
_MIN_PART_KEYWORDS = 2  # a clause with fewer says too little to search on its own

_CLAUSE_BREAK = re.compile(
    r"\?\s+(?=\S)|;\s*|,?\s+and\s+(?=(?:what|when|where|who|whom|whose|why|how|which|did|"
    r"does|do|is|are|was|were|has|have|had|can|could|will|would)\b)",
    re.IGNORECASE,
)
_EXCEPTION = re.compile(
    r"\s*,?\s+\b(?:besides|other than|apart from|aside from|except(?: for)?|in addition to)\b\s+",
    re.IGNORECASE,
)
_COMPARISON = re.compile(
    r"\b(?:compare[sd]?|comparison|difference|differ(?:s|ent)?|vs\.?|versus|better|worse|"
    r"prefer(?:s|red)?|more\s+\w+\s+than|less\s+\w+\s+than|\w+er\s+than)\b",
    re.IGNORECASE,
)
_CHOICE = re.compile(r"^(?:which|who)\b", re.IGNORECASE)  # "Which is faster, A or B?"
_VERSUS = re.compile(r"\b([\w.+#-]+)\s+(?:vs\.?|versus)\s+([\w.+#-]+)", re.IGNORECASE)
_SHARED_WORDS = re.compile(r"\s*\b(?:both|together|either|neither)\b", re.IGNORECASE)
_POSSESSIVE = r"(?:['’]s)?"


class RuleDecomposer:
    """``QueryDecomposer`` by the rules above; at most ``max_parts`` sub-queries."""

    def __init__(self, max_parts: int = DEFAULT_MAX_PARTS) -> None:
        self._max_parts = max_parts

    async def decompose(self, query: str, rules: EntityRules) -> list[str]:
        return decompose(query, rules, self._max_parts)


def decompose(question: str, rules: EntityRules, max_parts: int = DEFAULT_MAX_PARTS) -> list[str]:
    """Sub-queries of ``question`` (never the question itself), best first; [] = no split.
    Names are read by ``rules`` (the recall's profile's)."""
    text = " ".join(question.split())
    parts = _clauses(text)
    parts = [p for part in parts for p in _exceptions(part, text, rules)]
    parts = [p for part in parts for p in _names(part, rules)]
    return _distinct(parts, text)[:max_parts]


def _distinct(parts: Sequence[str], question: str) -> list[str]:
    seen = {_norm(question)}
    out: list[str] = []
    for p in parts:
        key = _norm(p)
        if key and key not in seen and len(keywords(p)) >= 1:
            seen.add(key)
            out.append(p)
    return out


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _clauses(text: str) -> list[str]:
    pieces = [p.strip(" ,") for p in _CLAUSE_BREAK.split(text)]
    kept = [p for p in pieces if len(keywords(p)) >= _MIN_PART_KEYWORDS]
    return kept if len(kept) >= 2 else [text]


def _exceptions(part: str, question: str, rules: EntityRules) -> list[str]:
    pieces = [p.strip(" ,?") for p in _EXCEPTION.split(part, maxsplit=1)]
    if len(pieces) < 2 or not all(keywords(p) for p in pieces):
        return [part]
    head, tail = pieces
    # "… besides not being able to hike" is about the question's person too.
    people = [e.name for e in extract_entities(question, rules) if e.kind == PEOPLE]
    missing = [n for n in people if n.lower() not in tail.lower()]
    return [head, " ".join([*missing, tail])]


def _names(part: str, rules: EntityRules) -> list[str]:
    # Concepts ("adoption", "mental health") are the topic, not things to split on.
    entities = [e for e in extract_entities(part, rules) if e.kind != CONCEPTS]
    names = sorted({e.name for e in entities}, key=len, reverse=True)
    coordinated = _coordination(part, names)
    if coordinated is not None:
        start, end, members, possessive, conjunction = coordinated
        choice = conjunction == "or" and _CHOICE.match(part) is not None
        if choice or _COMPARISON.search(part) is not None:
            return [_with_topic(m, part, names) for m in members]
        return [
            " ".join(_SHARED_WORDS.sub("", part[:start] + m + possessive + part[end:]).split())
            for m in members
        ]
    versus = _VERSUS.search(part)
    if versus is not None:
        sides = [versus.group(1), versus.group(2)]
        rest = part[: versus.start()] + part[versus.end() :]
        topic = " ".join(w for w in keywords(rest) if w not in {"vs", "versus"})
        return [f"{s} {topic}".strip() for s in sides]
    return [part]


def _coordination(part: str, names: Sequence[str]) -> tuple[int, int, list[str], str, str] | None:
    """The first "A and B" / "A, B or C" of names: (start, end, the names, "'s" or "",
    the conjunction lower-cased)."""
    if len(names) < 2:
        return None
    name = "(?:" + "|".join(re.escape(n) for n in names) + ")"
    rx = re.compile(
        rf"\b(?:between\s+)?{name}{_POSSESSIVE}(?:\s*,\s*{name}{_POSSESSIVE})*"
        rf"\s*,?\s+(and|or|&)\s+{name}({_POSSESSIVE})(?!\w)",
        re.IGNORECASE,
    )
    m = rx.search(part)
    if m is None:
        return None
    span = part[m.start() : m.end()]
    members = list(dict.fromkeys(re.findall(name, span, re.IGNORECASE)))
    if len(members) < 2:
        return None
    return m.start(), m.end(), members, m.group(2) or "", m.group(1).lower()


def _topic(part: str, names: Sequence[str]) -> str:
    name_words = {w for n in names for w in re.findall(r"\w+", n.lower())}
    comparison_words = {"compare", "compared", "compares", "comparison", "difference", "versus"}
    return " ".join(w for w in keywords(part) if w not in name_words and w not in comparison_words)


def _with_topic(name: str, part: str, names: Sequence[str]) -> str:
    topic = _topic(part, names)
    return f"{name} {topic}".strip()
