"""Rule-based entity extraction (DESIGN §2): text → ``Entity(kind, slug, name)``.

Pure and deterministic: no model, no I/O but the shipped lexicon read once; the same
text always gives the same list, de-duplicated by (kind, slug) and sorted by it. Rules,
in order; a stretch of text claimed by an earlier rule is not reused by a later one:

1. projects by pattern: ``github.com/org/repo`` and ``org/repo``, ``#name``,
   ``project X`` (X capitalised, quoted, or with a digit/-/_ in it), ``the X project``;
2. organizations by pattern: ``Acme Corp`` (Inc, Corp, Corporation, LLC, Ltd, Limited,
   GmbH, University, Foundation, Institute) and ``University of X``;
3. lexicons of tools, organizations, places and concepts (``engram_core.lexicon``: data
   files a deployment can replace), matched case-insensitively, longest alias first
   ("Google Cloud" before "Google"), aliases sharing one slug ("k8s" → kubernetes) —
   except words that are also plain English ("rust", "slack", "apple", "turkey"), which
   count only capitalised and not at a sentence start, and acronyms that are also words
   ("WHO", "UN", "LA"), which count only in capitals;
4. places after a travel verb: ``moved to Lisbon``, ``a conference in Austin``;
5. people: ``Name:`` speaker prefixes at a line start when the rules ask for them
   (``EntityRules.speaker_names``: chat transcripts), and runs of capitalised words
   (up to three, joined with a space) that are not common words, titles, acronyms,
   months or days, and — for a single word — not at a sentence start. A one-word
   name that is part of a longer name in the same text ("Sarah" with "Sarah Connor")
   is folded into it.

Capitalisation heuristics miss lower-cased names and catch some title-cased
phrases; the extractor is a first cut that a model-based one can replace behind the
same function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engram_core.lexicon import (
    CAPITALISED,
    CONCEPTS,
    ORGANIZATIONS,
    PEOPLE,
    PLACES,
    PROJECTS,
    TOOLS,
    UPPER,
    Lexicon,
    builtin_lexicon,
    slugify,
)
from engram_core.model import Entity
from engram_core.profiles import CONVERSATION, PROFILES, Profile

__all__ = [
    "CONCEPTS",
    "ORGANIZATIONS",
    "PEOPLE",
    "PLACES",
    "PROJECTS",
    "TOOLS",
    "EntityRules",
    "builtin_rules",
    "conversation_rules",
    "extract_entities",
    "slugify",
]

MAX_NAME_WORDS = 3


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Capitalised at a sentence start or in a heading, but never a person's name.
COMMON_WORDS = _words(
    """
    i i'm i've i'd i'll im ive me my mine myself we we're we've us our ours you you're you've
    your yours he he's him his she she's her hers it it's its they they're they've them their
    theirs this that these those there there's here here's what what's which who who's whom
    whose when where why how a an the and or but nor so yet if then else than because since
    although though while whereas unless until as of at by for from in into on onto off out
    over under up down to with without within about above below after before between through
    during against among around across behind beyond near per via like unlike
    is are was were be been being am do does did done doing have has had having will would
    shall should can could may might must ought let let's lets
    not no yes yeah yep nope ok okay sure maybe perhaps also just only even still already
    really very quite so too again always never often sometimes usually today tomorrow
    yesterday tonight now later soon recently finally actually basically honestly hopefully
    anyway anyways meanwhile however therefore otherwise instead besides overall first second
    third next last then once
    hi hello hey hiya thanks thank thx congrats congratulations wow oh ah aw aww omg lol haha
    hmm um uh please sorry welcome good great nice cool awesome amazing wonderful love
    dear bye goodbye cheers
    all any some every each both either neither many much more most few less least other
    another such same own one two three four five six seven eight nine ten none nothing
    something anything everything someone anyone everyone somebody anybody everybody
    new old big small best better worst worse happy sad glad
    went go going gone get got getting make made take took see saw seen know knew think
    thought feel felt want wanted need needed tried try trying use used using keep kept
    started start finished went visited met meet call called tell told say said ask asked
    remember remembered hope looking look looks check read wrote write moving moved
    monday tuesday wednesday thursday friday saturday sunday weekend weekday
    january february march april may june july august september october november december
    mon tue tues wed thu thur thurs fri sat sun jan feb mar apr jun jul aug sep sept oct
    nov dec
    christmas easter halloween thanksgiving hanukkah ramadan diwali new year eve
    mr mrs ms miss dr prof sir madam mom mum dad mother father grandma grandpa
    god internet web email
    english french german spanish italian portuguese dutch russian chinese japanese korean
    american british canadian australian european asian african indian mexican brazilian
    irish scottish swedish norwegian danish polish greek turkish arabic hindi
    memory decision pattern preference style habit insight context metapattern
    note notes todo update summary question answer user assistant system agent bot human
    ai q a re fwd fyi ps nb tl dr tldr eta asap faq
    phd msc bsc mba ba ma ceo cto cfo coo vp hr
    """
)
_TITLES = frozenset({"mr", "mrs", "ms", "dr", "prof", "sir"})


# A lexicon token: "node.js", "c++", "c#", "self-care" stay whole; "Paris." loses its dot.
_TERM_TOKEN_RE = re.compile(r"[^\W_](?:\w|[.'’-](?=\w)|[+#])*")
# Not a word when glued to these: a path, a handle, an e-mail address.
_GLUE_BEFORE = frozenset("#@/\\")
_GLUE_AFTER = frozenset("@/\\")

_CAP = r"[^\W\d_][\w'’&-]*"  # a word; whether it is capitalised is checked in code
_WORD_RE = re.compile(r"[^\W\d_][\w'’-]*")
_GITHUB_RE = re.compile(r"\b(?:github|gitlab)\.com/([\w.-]+)/([\w.-]+)", re.IGNORECASE)
_REPO_RE = re.compile(r"(?<![\w./:@-])([A-Za-z0-9][\w.-]*)/([A-Za-z0-9][\w.-]*)(?![\w/-])")
_HASHTAG_RE = re.compile(r"(?<![\w&#])#([^\W\d_][\w-]*)")
_PROJECT_RE = re.compile(
    r"\b[Pp]roject\s+(?:[\"“']([^\"”'\n]{1,60})[\"”']"
    r"|([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})"
    r"|([a-z][a-z0-9]*[-_0-9][\w-]*))"
)
_NAMED_PROJECT_RE = re.compile(r"\b([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})\s+project\b")
_ORG_SUFFIX_RE = re.compile(
    r"\b((?:[A-Z][\w&'’.-]*\s+){1,4}?)"
    r"(Inc\b\.?|Corp\b\.?|Corporation\b|LLC\b|Ltd\b\.?|Limited\b|GmbH\b|University\b"
    r"|Foundation\b|Institute\b)"
)
_UNIVERSITY_OF_RE = re.compile(r"\bUniversity\s+of\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})")
_TRAVEL_RE = re.compile(
    r"\b(?:go|goes|going|gone|went|travel\w*|trips?|flew|fly|flying|flights?|move[sd]?|moving"
    r"|relocat\w*|live[sd]?|living|visit\w*|stay\w*|vacation\w*|holidays?|born|based|drove"
    r"|driving|arriv\w*|road\s+trip|honeymoon)\b",
    re.IGNORECASE,
)
_TRAVEL_PLACE_RE = re.compile(
    r"\b(?:to|in|from)\s+(?:the\s+)?(" + _CAP + r"(?:\s+" + _CAP + r"){0,2})"
)
_TRAVEL_WINDOW = 60
_SPEAKER_RE = re.compile(
    r"^[ \t>*•-]*(" + _CAP + r"(?:[ ]" + _CAP + r"){0,2})[ \t]*:(?!//)", re.MULTILINE
)
_SENTENCE_ENDS = ".!?:;\n…"
_SENTENCE_BREAK = re.compile(r"[.!?:;\n…]")
_REPO_STOP = frozenset(
    {
        "and/or", "he/she", "his/her", "him/her", "s/he", "yes/no", "on/off", "read/write",
        "input/output", "client/server", "pros/cons", "true/false", "either/or", "ci/cd",
        "tcp/ip", "w/o", "n/a", "a/b", "i/o", "am/pm", "dev/prod", "front/back",
    }
)  # fmt: skip


def _is_capitalised(word: str) -> bool:
    # Acronyms (LGBTQ, API) are not names; "I" is caught by the common-word list.
    return word[:1].isupper() and not (len(word) > 1 and word.isupper())


def _base(word: str) -> str:
    """The word without a possessive: Melanie's → Melanie."""
    return word[:-2] if word.endswith(("'s", "’s")) else word


def _is_common(word: str) -> bool:
    return _base(word).lower().replace("’", "'") in COMMON_WORDS


class _Found:
    """Entities found so far, one per (kind, slug), and the character spans claimed."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.lexicon = lexicon
        self.entities: dict[tuple[str, str], Entity] = {}
        self._claimed: list[tuple[int, int]] = []

    def free(self, start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in self._claimed)

    def add(self, kind: str, name: str, start: int, end: int, slug: str | None = None) -> None:
        slug = slug if slug is not None else slugify(name)
        self._claimed.append((start, end))
        if slug:
            self.entities.setdefault((kind, slug), Entity(kind=kind, slug=slug, name=name))


def _projects(text: str, found: _Found) -> None:
    for m in _GITHUB_RE.finditer(text):
        org, repo = m.group(1).rstrip("."), m.group(2).rstrip(".").removesuffix(".git")
        found.add(PROJECTS, f"{org}/{repo}", m.start(), m.end())
    for m in _REPO_RE.finditer(text):
        org, repo = m.group(1), m.group(2).rstrip(".")
        if not found.free(m.start(), m.end()) or f"{org}/{repo}".lower() in _REPO_STOP:
            continue
        if min(len(org), len(repo)) < 2 or org.isdigit() or repo.isdigit():
            continue
        if _is_common(org) or _is_common(repo):
            continue
        if org.lower() in found.lexicon.places or repo.lower() in found.lexicon.places:
            continue
        found.add(PROJECTS, f"{org}/{repo}", m.start(), m.start() + len(org) + 1 + len(repo))
    for m in _HASHTAG_RE.finditer(text):
        if found.free(m.start(), m.end()):
            found.add(PROJECTS, m.group(1), m.start(), m.end())
    for m in _PROJECT_RE.finditer(text):
        name = next(g for g in m.groups() if g is not None).strip()
        if found.free(m.start(), m.end()) and not _is_common(name.split()[0]):
            found.add(PROJECTS, name, m.start(), m.end())
    for m in _NAMED_PROJECT_RE.finditer(text):
        # "the Engram project"; "The project" and "Sarah's project" name none.
        words = m.group(1).split()
        while words and _is_common(words[0]):
            words.pop(0)
        if not words or any(w != _base(w) for w in words):
            continue
        start = m.start(1) + m.group(1).index(words[0])
        if found.free(start, m.end()):
            found.add(PROJECTS, " ".join(words), start, m.end())


def _organizations(text: str, found: _Found) -> None:
    for m in _UNIVERSITY_OF_RE.finditer(text):
        if found.free(m.start(), m.end()):
            found.add(ORGANIZATIONS, f"University of {m.group(1)}", m.start(), m.end())
    for m in _ORG_SUFFIX_RE.finditer(text):
        words = m.group(1).split()
        # "At Acme Corp" → "Acme Corp": leading common words are not part of the name.
        while words and _is_common(words[0]):
            words.pop(0)
        if not words or not all(w[:1].isupper() for w in words):
            continue
        suffix = m.group(2).rstrip(".")
        start = m.start(1) + m.group(1).index(words[0])
        if found.free(start, m.end()):
            found.add(ORGANIZATIONS, " ".join([*words, suffix]), start, m.end())


def _at_sentence_start(text: str, pos: int) -> bool:
    before = text[:pos].rstrip(" \t\"“'‘([*•>-")
    return not before or before[-1] in _SENTENCE_ENDS


def _lexicons(text: str, found: _Found) -> None:
    tokens = list(_TERM_TOKEN_RE.finditer(text))
    first_words = found.lexicon.first_words
    i = 0
    while i < len(tokens):
        # Most words start no alias: one set lookup each, no call.
        word = tokens[i].group().lower()
        if word in first_words or word[:-2] in first_words:  # word or word's
            i += _lexicon_match(text, tokens, i, found)
        else:
            i += 1


def _lexicon_match(text: str, tokens: list[re.Match[str]], i: int, found: _Found) -> int:
    """The longest alias starting at token i (words apart by blanks only); tokens used."""
    first, lexicon = tokens[i], found.lexicon
    if first.start() > 0 and text[first.start() - 1] in _GLUE_BEFORE:
        return 1
    candidates: list[tuple[int, str, int]] = []  # (words, text matched, end)
    words: list[str] = []
    for n in range(1, min(lexicon.max_words, len(tokens) - i) + 1):
        tok = tokens[i + n - 1]
        if n > 1 and text[tokens[i + n - 2].end() : tok.start()].strip():
            break
        word = tok.group()
        base = _base(word)  # "Google's" is Google
        phrase = " ".join([*words, base])
        if phrase.lower() in lexicon.terms and text[tok.end() : tok.end() + 1] not in _GLUE_AFTER:
            candidates.append((n, phrase, tok.start() + len(base)))
        words.append(word)
        if base != word or " ".join(words).lower() not in lexicon.prefixes:
            break
    for n, matched, end in reversed(candidates):
        term, mode = lexicon.terms[matched.lower()]
        if mode == UPPER and matched != matched.upper():
            continue
        # "Go ahead", "Slack off": a capital that only starts a sentence proves nothing.
        if mode == CAPITALISED and (
            not matched[:1].isupper() or _at_sentence_start(text, first.start())
        ):
            continue
        if found.free(first.start(), end):
            found.add(term.kind, term.name, first.start(), end, slug=term.slug)
            return n
    return 1


def _travel_places(text: str, found: _Found) -> None:
    for verb in _TRAVEL_RE.finditer(text):
        window_end = verb.end() + _TRAVEL_WINDOW
        brk = _SENTENCE_BREAK.search(text, verb.end(), window_end)
        window = text[verb.end() : brk.start() if brk else window_end]
        for m in _TRAVEL_PLACE_RE.finditer(window):
            words: list[str] = []
            for w in m.group(1).split():
                if not _is_capitalised(w) or _is_common(w):
                    break
                words.append(w)
            start = verb.end() + m.start(1)
            if not words or words[-1] != _base(words[-1]):  # "Sarah's party" is no place
                continue
            end = start + len(" ".join(words))
            if found.free(start, end):
                found.add(PLACES, " ".join(words), start, end)


def _speakers(text: str, found: _Found) -> None:
    for m in _SPEAKER_RE.finditer(text):
        words = m.group(1).split()
        if all(_is_capitalised(w) and not _is_common(w) for w in words) and found.free(
            m.start(1), m.end(1)
        ):
            found.add(PEOPLE, " ".join(words), m.start(1), m.end(1))


def _people(text: str, found: _Found) -> None:
    run: list[tuple[str, int, int, bool]] = []  # (word, start, end, starts a sentence)

    def flush() -> None:
        if run and len(run) <= MAX_NAME_WORDS and (len(run) > 1 or not run[0][3]):
            found.add(PEOPLE, " ".join(_base(w) for w, *_ in run), run[0][1], run[-1][2])
        run.clear()

    prev_end, prev_word = 0, ""
    for m in _WORD_RE.finditer(text):
        word, start, end = m.group(), m.start(), m.end()
        gap = text[prev_end:start]
        if word[0].isupper():
            at_start = prev_end == 0 or (
                gap != " "
                and _SENTENCE_BREAK.search(gap) is not None
                and prev_word.lower() not in _TITLES  # "Dr. Smith": the dot ends nothing
            )
            # Names join over one blank; a possessive ends one ("Sarah's Docker").
            if not (run and gap == " " and run[-1][0] == _base(run[-1][0])):
                flush()
            if _is_capitalised(word) and not _is_common(word) and found.free(start, end):
                run.append((word, start, end, at_start))
            else:
                flush()
        else:
            flush()
        prev_end, prev_word = end, word
    flush()

    # "Sarah" next to "Sarah Connor" in the same text is the same person.
    parts = {
        w
        for (kind, slug) in found.entities
        if kind == PEOPLE and "-" in slug
        for w in slug.split("-")
    }
    for key in [k for k in found.entities if k[0] == PEOPLE and k[1] in parts]:
        del found.entities[key]


@dataclass(frozen=True, slots=True)
class EntityRules:
    """What extraction uses besides the fixed rules: the lexicon, and whether a ``Name:``
    prefix at a line start names a person (chat transcripts; ``Profile.speaker_names``)."""

    lexicon: Lexicon
    speaker_names: bool = True


def builtin_rules(profile: Profile) -> EntityRules:
    """The profile's rules over the shipped lexicon (a deployment's: engram_platform)."""
    return EntityRules(builtin_lexicon(profile.concepts), profile.speaker_names)


def conversation_rules() -> EntityRules:
    return builtin_rules(PROFILES[CONVERSATION])


def extract_entities(text: str, rules: EntityRules | None = None) -> list[Entity]:
    """Entities mentioned in text, one per (kind, slug), sorted by (kind, slug).

    Without rules, the conversation profile's (``conversation_rules``).
    """
    rules = rules or conversation_rules()
    found = _Found(rules.lexicon)
    _projects(text, found)
    _organizations(text, found)
    _lexicons(text, found)
    _travel_places(text, found)
    if rules.speaker_names:
        _speakers(text, found)
    _people(text, found)
    return [found.entities[k] for k in sorted(found.entities)]
