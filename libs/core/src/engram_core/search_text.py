"""The text BM25 sees for a memory, in every text index alike (tantivy, OpenSearch, the fake).

One analysed field holds the content, each tag as words (``project:alpha`` → "project alpha",
so "project alpha" finds the tag) and the values of the whitelisted metadata fields (a memory
whose topic sits in ``metadata.topic`` and not in its words is still found by it). One field
keeps a query at one clause per term (half the cost of two fields).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from itertools import pairwise
from typing import Any

from engram_core.model import Memory

# Fields whose values are indexed with the content unless a deployment names others.
METADATA_FIELDS: tuple[str, ...] = ("topic", "project", "source")
_SEPARATORS = re.compile(r"[\W_]+")


def document_text(memory: Memory, metadata_fields: Sequence[str]) -> list[str]:
    """The memory's content, then its tags as words, then its whitelisted metadata values
    (strings, numbers, and lists of them; nested objects are not read)."""
    tags = [w for t in memory.tags if (w := _SEPARATORS.sub(" ", t).strip())]
    meta = [s for name in metadata_fields for s in _values(memory.metadata.get(name))]
    return [memory.content, *tags, *meta]


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, bool):
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _values(v)


# Function words left out of queries (never out of the index): they match most documents, so
# they cost the most to score and move BM25 the least. Halves search time on LoCoMo questions
# (tantivy).
# Words that are also names or dates ("may", "will", "us") stay.
QUERY_STOPWORDS: tuple[str, ...] = tuple(
    """a about am an and any are as at be been being but by can could did do does doing for
    from had has have having he her hers him his how i if in into is it its me my no not of on
    or our ours she should so such than that the their theirs them then there these they this
    those to too very was we were what when where which who whom why with would you your yours
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# Weight of a query's adjacent word pair found as a phrase, against one BM25 term match.
PHRASE_BOOST = 1.0
MAX_PHRASES = 8


QUERY_STOPWORD_SET = frozenset(QUERY_STOPWORDS)
_QUERY_WORD = re.compile(r"\w+(?:['’.]\w+)*")


def query_words(query: str) -> list[str]:
    """The query's words, lower-cased, in order (repeats kept); never parsed as syntax."""
    return [w.lower() for w in _QUERY_WORD.findall(query)]


def word_pairs(
    query: str, stopwords: Collection[str] = QUERY_STOPWORD_SET
) -> list[tuple[str, str]]:
    """The query's adjacent words in pairs, lower-cased and in order ("billing ledger", "red
    house"), without a pair of two stopwords ("did she"), distinct, at most ``MAX_PHRASES``:
    a memory holding one as a phrase gains ``PHRASE_BOOST`` in BM25, in every text index."""
    words = query_words(query)
    out: dict[tuple[str, str], None] = {}
    for a, b in pairwise(words):
        if (a not in stopwords or b not in stopwords) and len(out) < MAX_PHRASES:
            out[(a, b)] = None
    return list(out)
