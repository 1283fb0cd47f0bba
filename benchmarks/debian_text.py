"""Prose out of Debian's documentation packages: per-format paragraph readers, a sentence splitter and filters.

Used by ``benchmarks/debian_corpus.py``; pure functions over text (no downloads), so tests can call them on
hand-written snippets. The pipeline for one extracted package is ``package_sentences(root)``:

* ``file_paragraphs(path)`` picks a reader by name and content: HTML (``html.parser``; the text of ``pre``,
  ``code`` blocks inside ``pre``, ``table``, ``script``, ``style``, ``head`` and ``nav`` is dropped), man pages
  (roff and mdoc, requests and escapes stripped, no-fill and table regions dropped), Perl POD, dictd
  dictionaries (``*.dict.dz``: headwords, pronunciations, etymologies and citations stripped), WordNet
  ``data.*`` glosses, fortune files and plain text / reStructuredText / Texinfo (lines indented by 8+ columns,
  directives and underlines dropped); anything gzipped is read through ``gzip``. Sphinx sources (``*.rst``,
  ``_sources/``) and Texinfo manuals (``*.info*``) are skipped where the package ships HTML, and other languages' trees
  (``de-DE/``, ``translations/``) are skipped.
* ``split_sentences(paragraph)`` splits after ``.``, ``!`` or ``?`` (closing quotes and brackets kept) before
  whitespace and a capital, digit, quote or bracket, except after a known abbreviation ("e.g.", "Dr.", ...)
  or a single initial ("J. Smith").
* ``keep_sentence(sentence)`` keeps whitespace-normalised sentences of 5 to 60 words that end in
  ``.``/``!``/``?`` (or a closing quote or bracket after one), are at least 75 % letters among their
  non-space characters, at most 5 % non-ASCII letters, hold no code tokens (``{ } == => -> && || :: </``),
  and look English: at least 12 % of their words are common English function words.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from debian_formats import (
    dict_paragraphs,
    fortune_paragraphs,
    html_paragraphs,
    plain_paragraphs,
    pod_paragraphs,
    roff_paragraphs,
    wordnet_paragraphs,
)

MIN_WORDS = 5
MAX_WORDS = 60
MIN_LETTER_SHARE = 0.75
MAX_NON_ASCII_LETTER_SHARE = 0.05
MIN_FUNCTION_WORD_SHARE = 0.12
FUNCTION_WORDS = frozenset({
    "the", "a", "an", "of", "to", "in", "is", "are", "was", "were", "be", "been", "and", "or", "but", "not", "for",
    "with", "that", "this", "these", "those", "it", "its", "by", "on", "as", "at", "from", "if", "then", "than",
    "which", "who", "whom", "what", "when", "where", "can", "may", "must", "should", "will", "would", "has", "have",
    "had", "do", "does", "no", "all", "any", "each", "such", "into", "only", "also", "more", "most", "other",
    "some", "there", "their", "they", "you", "your", "we", "our", "he", "his", "she", "her"
})
CODE_TOKENS = ("{", "}", "==", "=>", "->", "&&", "||", "::", "</", "/>", "$(", "#include", "0x")
ABBREVIATIONS = frozenset({
    "e.g", "i.e", "etc", "vs", "cf", "al", "fig", "figs", "no", "nos", "vol", "vols", "ed", "eds", "p", "pp", "ch",
    "sec", "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "inc", "ltd", "co", "corp", "approx", "ca", "esp",
    "resp", "viz", "lit", "obs", "dept", "univ", "gen", "gov", "rev", "jan", "feb", "mar", "apr", "jun", "jul",
    "aug", "sep", "sept", "oct", "nov", "dec", "n", "v", "t", "adj", "adv", "pl", "sing", "a.m", "p.m", "u.s"
})

_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")
_LAST_WORD = re.compile(r"(\S+)\.$")
_ENDS_SENTENCE = re.compile(r"[.!?][\"')\]]*$")
_LOCALE_DIR = re.compile(r"^[a-z]{2,3}[-_][A-Z]{2}$")
_SOURCE_SUFFIXES = (".rst", ".rst.gz", ".rst.txt")
_SKIP_NAMES = re.compile(r"^(copyright|changelog.*|NEWS.*|.*\.(dat|js|css|svg|png|gif|jpe?g|json|xml|ya?ml|py|c|h|"
                         r"sh|pl|pm|conf|index|ri|chunk|pdf|ps|dvi|woff2?|ttf|map|inv|pickle|doctree))$")


def normalise(text: str) -> str:
    """Whitespace runs (newlines, tabs, non-breaking spaces) become one space; ends are trimmed."""
    return " ".join(text.split())


def split_sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (whitespace-normalised), split as the module docstring says."""
    text = normalise(paragraph)
    pieces, start = [], 0
    for match in _BOUNDARY.finditer(text):
        head = text[start:match.start(1)]
        last = _LAST_WORD.search(head)
        word = last.group(1).lower().lstrip("(\"'[") if last else ""
        if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        pieces.append(text[start:match.end(1)].strip())
        start = match.end()
    pieces.append(text[start:].strip())
    return [piece for piece in pieces if piece]


def keep_sentence(sentence: str) -> bool:
    """Whether a whitespace-normalised sentence passes the module docstring's filters."""
    words = sentence.split(" ")
    if not MIN_WORDS <= len(words) <= MAX_WORDS or not _ENDS_SENTENCE.search(sentence):
        return False
    if any(token in sentence for token in CODE_TOKENS):
        return False
    visible = len(sentence) - len(words) + 1
    letters = sum(char.isalpha() for char in sentence)
    if letters < MIN_LETTER_SHARE * visible:
        return False
    if sum(char.isalpha() and not char.isascii() for char in sentence) > MAX_NON_ASCII_LETTER_SHARE * letters:
        return False
    function_words = sum(word.strip("\"'(),;:.!?").lower() in FUNCTION_WORDS for word in words)
    return function_words >= MIN_FUNCTION_WORD_SHARE * len(words)


def sentences_of(paragraphs: Iterable[str]) -> Iterator[str]:
    """Every kept sentence of ``paragraphs``, in order (duplicates included)."""
    for paragraph in paragraphs:
        for sentence in split_sentences(paragraph):
            if keep_sentence(sentence):
                yield sentence


class Deduplicator:
    """Remembers sentences case-insensitively (``str.casefold`` of the normalised text)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self.offered = 0

    def is_new(self, sentence: str) -> bool:
        """True the first time a sentence (up to case) is offered, False after."""
        self.offered += 1
        key = sentence.casefold()
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def __len__(self) -> int:
        return len(self._seen)



Reader = Callable[[str], Iterable[str]]


def _reader(path: Path, head: str) -> Reader | None:
    """The paragraph reader for a file, by its name (without ``.gz``) and first characters; None to skip it."""
    name = path.name.removesuffix(".gz")
    parts = path.parts
    if name.endswith((".dict.dz", ".dict")):
        return dict_paragraphs
    if name in ("data.noun", "data.verb", "data.adj", "data.adv") and "wordnet" in parts:
        return wordnet_paragraphs
    if "fortunes" in parts and "games" in parts:
        return None if "." in name else fortune_paragraphs
    if name.endswith((".html", ".htm", ".xhtml")):
        return html_paragraphs
    if "man" in parts or head.startswith((".TH", '.\\"', "'\\\"", ".Dd", ".so")):
        return None if head.startswith(".so") else roff_paragraphs
    if name.endswith(".pod") or head.startswith(("=pod", "=head", "=encoding")):
        return pod_paragraphs
    if _SKIP_NAMES.match(name) or "\0" in head:
        return None
    return plain_paragraphs


def _read_text(path: Path) -> str:
    opener = gzip.open if path.name.endswith((".gz", ".dz")) else open
    with opener(path, "rb") as handle:
        return handle.read().decode("utf-8", errors="replace")


def _wanted_files(root: Path) -> list[Path]:
    """The files of an extracted package worth reading, sorted: not other languages' trees, and no Sphinx or
    reST sources where the package ships rendered HTML."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    has_html = any(path.name.endswith((".html", ".htm")) for path in files)
    wanted = []
    for path in files:
        relative = path.relative_to(root).parts
        if any(_LOCALE_DIR.match(part) and not part.startswith("en") for part in relative):
            continue
        if "translations" in relative or "_static" in relative or "lintian" in relative:
            continue
        if has_html and ("_sources" in relative or path.name.endswith(_SOURCE_SUFFIXES) or ".info" in path.name):
            continue
        wanted.append(path)
    return wanted


def file_paragraphs(path: Path) -> Iterable[str]:
    """The prose paragraphs of one file, read by the reader its name and content call for (none if skipped)."""
    with open(path, "rb") as handle:
        raw_head = handle.read(2)
    if raw_head == b"\x1f\x8b" or path.name.endswith((".gz", ".dz")):
        try:
            text = _read_text(path)
        except (OSError, EOFError):
            return []
    else:
        text = _read_text(path)
    reader = _reader(path, text[:200])
    return [] if reader is None else reader(text)


def package_sentences(root: Path, seen: Deduplicator | None = None) -> Iterator[str]:
    """Every kept sentence of an extracted package's files, deduplicated within the package (first one wins);
    ``seen`` (a fresh one by default) counts what was offered."""
    seen = Deduplicator() if seen is None else seen
    for path in _wanted_files(root):
        for sentence in sentences_of(file_paragraphs(path)):
            if seen.is_new(sentence):
                yield sentence
