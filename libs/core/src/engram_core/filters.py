"""The reference semantics of `Filter`, used by fakes and by adapters that post-filter."""

from __future__ import annotations

from engram_core.model import Filter, Memory, TagMatch, TagMode
from engram_core.tags import normalise_tag, tag_prefixes


def matches(memory: Memory, flt: Filter) -> bool:
    if memory.archived and not flt.include_archived:
        return False
    if flt.types and memory.type not in flt.types:
        return False
    if flt.exclude_types and memory.type in flt.exclude_types:
        return False
    if flt.start is not None and memory.timestamp < flt.start:
        return False
    if flt.end is not None and memory.timestamp > flt.end:
        return False
    prefixes = set(memory.tag_prefixes) or set(tag_prefixes(memory.tags))
    if any(normalise_tag(t) in prefixes for t in flt.exclude_tags):
        return False
    if flt.tags:
        have = prefixes if flt.tag_match is TagMatch.PREFIX else set(memory.tags)
        wanted = [normalise_tag(t) in have for t in flt.tags]
        ok = all(wanted) if flt.tag_mode is TagMode.ALL else any(wanted)
        if not ok:
            return False
    return True
