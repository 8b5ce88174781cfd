"""Entity lexicons: the names of tools, organizations, places and concepts, as data.

A lexicon file holds one term a line, ``Name | alias | alias``: every name is matched, the
first is the one kept. Blank lines and lines starting with ``#`` are skipped. The file's
name says what it holds: ``<kind>[.<variant>][.capitalised].txt``, kind one of tools,
organizations, places, concepts. An alias written in capitals (``WHO``, ``LA``) counts only
in capitals, so "who" and "la" stay words; in a ``.capitalised`` file — words that are also
plain English ("rust", "slack", "apple", "turkey") — every alias needs a capital initial,
and one that only starts a sentence proves nothing.

The files shipped in ``engram_core/lexicons`` are the built-in lexicons; each profile names
its concept file (``Profile.concepts``). Parsing is pure: it takes the files' text. A
deployment's own directory is read by ``engram_platform.lexicons``; the shipped files are
this package's own data, read once when first used.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

PEOPLE = "people"
TOOLS = "tools"
PROJECTS = "projects"
ORGANIZATIONS = "organizations"
PLACES = "places"
CONCEPTS = "concepts"
LEXICON_KINDS = (TOOLS, ORGANIZATIONS, PLACES, CONCEPTS)

# How an alias must be written in the text to count, most permissive first.
ANY, CAPITALISED, UPPER = 0, 1, 2
CAPITALISED_SUFFIX = ".capitalised"

# Names whose punctuation is the name: "C++" must not become "c".
_SLUGS = {"C++": "cpp", "C#": "csharp", "VS Code": "vscode"}


def slugify(name: str) -> str:
    """Lower-case ASCII, every run of other characters → one ``-``; accents are folded."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", folded.lower()).strip("-")


class LexiconError(ValueError):
    """A lexicon file that cannot be used, named with its line."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source} line {line}: {reason}" if line else f"{source}: {reason}")
        self.source = source
        self.line = line


@dataclass(frozen=True, slots=True)
class Term:
    kind: str
    slug: str
    name: str


@dataclass(frozen=True)
class Lexicon:
    """Alias (lower-cased) → the term it names and how it must be written to count."""

    terms: Mapping[str, tuple[Term, int]]
    # Aliases of places that count in any case: a repo-like "paris/london" is no project.
    places: frozenset[str] = frozenset()
    max_words: int = field(init=False)
    prefixes: frozenset[str] = field(init=False)  # every alias's leading words
    first_words: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        split = [alias.split() for alias in self.terms]
        prefixes = frozenset(" ".join(w[:k]) for w in split for k in range(1, len(w) + 1))
        object.__setattr__(self, "max_words", max((len(w) for w in split), default=0))
        object.__setattr__(self, "prefixes", prefixes)
        object.__setattr__(self, "first_words", frozenset(w[0] for w in split))


def lexicon_files(concepts: str) -> tuple[str, ...]:
    """The files of a lexicon whose concept file is ``<concepts>.txt``, least binding first:
    an alias in two files names the term of the later one (a tool before a place)."""
    return (
        f"{concepts}.txt",
        f"{PLACES}{CAPITALISED_SUFFIX}.txt",
        f"{PLACES}.txt",
        f"{ORGANIZATIONS}{CAPITALISED_SUFFIX}.txt",
        f"{ORGANIZATIONS}.txt",
        f"{TOOLS}{CAPITALISED_SUFFIX}.txt",
        f"{TOOLS}.txt",
    )


@dataclass(frozen=True, slots=True)
class LexiconFile:
    name: str  # e.g. "tools.txt": says the kind
    text: str
    path: str = ""  # where it was read, for errors; "" = shipped

    @property
    def source(self) -> str:
        return self.path or self.name


def parse_lexicon(files: Sequence[LexiconFile]) -> Lexicon:
    """A lexicon from files in ``lexicon_files`` order; LexiconError names the file and line
    of the first entry that cannot be used."""
    terms: dict[str, tuple[Term, int]] = {}
    places: set[str] = set()
    for f in files:
        kind, capitalised_only = check_file_name(f.name, f.source)
        parsed = _parse_file(f.source, f.text, kind, capitalised_only)
        terms.update(parsed)
        if kind == PLACES and not capitalised_only:
            places.update(parsed)
    return Lexicon(terms, frozenset(places))


def check_file_name(name: str, source: str) -> tuple[str, bool]:
    """The kind a lexicon file's name says, and whether it is a ``.capitalised`` one."""
    stem = name.removesuffix(".txt")
    kind = stem.split(".")[0]
    if not name.endswith(".txt") or kind not in LEXICON_KINDS:
        kinds = "|".join(LEXICON_KINDS)
        raise LexiconError(source, 0, f"not a lexicon file name (<{kinds}>[.variant].txt)")
    return kind, stem.endswith(CAPITALISED_SUFFIX)


def _parse_file(
    source: str, text: str, kind: str, capitalised_only: bool
) -> dict[str, tuple[Term, int]]:
    out: dict[str, tuple[Term, int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        names = [n.strip() for n in line.split("|")]
        if not all(names):
            raise LexiconError(source, number, f"an empty name in {line.strip()!r}")
        slug = _SLUGS.get(names[0]) or slugify(names[0])
        if not slug:
            raise LexiconError(source, number, f"{names[0]!r} has no letter or digit")
        term = Term(kind, slug, names[0])
        for alias in names:
            mode = UPPER if alias.isupper() and len(alias) > 1 else ANY
            if capitalised_only:
                mode = max(mode, CAPITALISED)
            key = " ".join(alias.lower().split())
            held = out.get(key)
            if held is None or mode < held[1]:
                out[key] = (term, mode)
    return out


def shipped_text(name: str) -> str:
    """The text of a lexicon file shipped with engram_core (its own package data)."""
    return resources.files(__package__).joinpath("lexicons", name).read_text(encoding="utf-8")


@functools.cache
def builtin_lexicon(concepts: str) -> Lexicon:
    """The shipped lexicon with the concept file ``<concepts>.txt``."""
    return parse_lexicon([LexiconFile(n, shipped_text(n)) for n in lexicon_files(concepts)])
