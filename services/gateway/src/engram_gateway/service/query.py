"""What the streams are asked, from the query text: graph seeds (entity keys and keywords)
and the text the vector stream embeds."""

from __future__ import annotations

import functools
import re

from engram_core.entities import PEOPLE, EntityRules, builtin_rules, extract_entities
from engram_core.profiles import profile_named

MAX_KEYWORDS = 16
MIN_KEYWORD_LENGTH = 3
_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    {
        "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
        "one", "our", "out", "has", "him", "his", "how", "its", "may", "new", "now", "old", "see",
        "two", "who", "did", "get", "let", "put", "say", "she", "too", "use", "that", "with",
        "have", "this", "will", "your", "from", "they", "know", "want", "been", "good", "much",
        "some", "time", "very", "when", "come", "here", "just", "like", "long", "make", "many",
        "more", "most", "over", "such", "take", "than", "them", "then", "well", "were", "what",
        "where", "which", "while", "would", "about", "after", "again", "also", "into", "only",
        "other", "their", "there", "these", "those", "through", "under", "until", "upon", "does",
        "doing", "done", "should", "could", "being", "because", "before", "between", "both",
        "each", "few", "same", "own", "why", "whom",
    }
)  # fmt: skip


@functools.cache
def rules_of(profile: str) -> EntityRules:
    """The entity rules of the profile named ``profile``: what the query is read with."""
    return builtin_rules(profile_named(profile))


def entity_keys(text: str, rules: EntityRules) -> tuple[str, ...]:
    return tuple(e.key for e in extract_entities(text, rules))


def keywords(text: str) -> tuple[str, ...]:
    """Distinct lower-cased words of >= 3 characters that are not stopwords, in text order."""
    words = (w for w in _WORD.findall(text.lower()) if len(w) >= MIN_KEYWORD_LENGTH)
    kept = dict.fromkeys(w for w in words if w not in STOPWORDS)
    return tuple(kept)[:MAX_KEYWORDS]


def dense_query(text: str, rules: EntityRules) -> str:
    """The query with the people it names left out, for the embedding.

    A small sentence embedder lets a name dominate the vector: "What did Caroline
    research?" lands near every turn that greets Caroline, not near the one about her
    research. Names are matched by the lexical and graph streams, so the vector stream is
    asked about the rest. A query that is nothing but names is left whole.
    """
    out = text
    for e in extract_entities(text, rules):
        if e.kind == PEOPLE:
            out = re.sub(rf"\b{re.escape(e.name)}(?:['’]s)?\b", " ", out)
    out = " ".join(out.split())
    return out if _WORD.search(out) else text
