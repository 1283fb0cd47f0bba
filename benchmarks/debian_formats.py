"""Paragraph readers for the formats Debian ships documentation in (used by ``debian_text.py``).

Each reader takes a file's decoded text and yields paragraphs of prose; markup is stripped, and the parts that
are not prose (code, tables, headings' markup, dictionary headwords) are dropped. Sentence splitting and
filtering happen afterwards, so a reader may let some noise through: the filters are the last word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser

from adaptemb.datasets.wordnet import parse_data_line

_INDENTED_CODE = 8


class _HtmlText(HTMLParser):
    """Collects the text of an HTML page as paragraphs, one per block element."""

    BLOCKS = frozenset({
        "p", "div", "li", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "br", "td", "th", "tr", "section",
        "article", "blockquote", "ul", "ol", "dl", "body", "figcaption", "caption", "header", "footer",
        "main", "aside", "hr"
    })
    SKIPPED = frozenset({
        "pre", "script", "style", "head", "nav", "table", "title", "svg", "math", "textarea", "select"
    })

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._parts: list[str] = []
        self._skip_depth = 0

    def flush(self) -> None:
        if self._parts:
            self.paragraphs.append("".join(self._parts))
            self._parts = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIPPED:
            self._skip_depth += 1
        if tag in self.BLOCKS or tag in self.SKIPPED:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIPPED and self._skip_depth:
            self._skip_depth -= 1
        if tag in self.BLOCKS or tag in self.SKIPPED:
            self.flush()

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            self._parts.append(data)


def html_paragraphs(text: str) -> list[str]:
    """One paragraph per block element; ``pre``, ``table``, ``script``, ``style``, ``head``, ``nav`` dropped."""
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    parser.flush()
    return parser.paragraphs


# --- roff (man(7) and mdoc(7)) -------------------------------------------------------------------------------
_ROFF_BREAKS = frozenset({
    "SH", "SS", "PP", "LP", "P", "IP", "TP", "HP", "sp", "br", "RS", "RE", "Pp", "Sh", "Ss", "Bl", "El", "It",
    "Lp", "Nd", "TH", "Dd", "Dt", "Os"
})
_ROFF_TEXT = frozenset({
    "B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "UR", "UE", "MT", "ME"
})
_MDOC_TEXT = frozenset({
    "Nm", "Ar", "Fl", "Cm", "Pa", "Va", "Dv", "Er", "Ev", "Fn", "Fa", "Ft", "Li", "Ql", "Dq", "Sq", "Pq",
    "Qq", "Em", "Sy", "Xr", "Ic", "An", "Tn", "No", "Ns", "Aq", "Bq", "Op", "Ox", "Fx", "Nx", "Bx", "Bsx",
    "At", "St", "Lb", "In", "Vt", "Mt", "Lk", "Xo", "Xc", "Sx", "Ad", "Ms", "Ot", "Brq", "Ux"
})
_ROFF_SKIP_REGIONS = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN", "PS": "PE", "Bd": "Ed", "de": "."}
_ROFF_ESCAPES = [
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),       # font changes
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),      # strings
    (re.compile(r"\\\((?:em|en)"), "-"), (re.compile(r"\\\((?:lq|rq|dq)"), '"'),
    (re.compile(r"\\\((?:aq|oq|cq)"), "'"),
    (re.compile(r"\\\(.."), ""), (re.compile(r"\\\[[^\]]*\]"), ""),
    (re.compile(r"\\s[+-]?\d+"), ""), (re.compile(r"\\[-]"), "-"), (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\[&|^c%:]"), ""), (re.compile(r"\\ "), " "), (re.compile(r"\\\"(.*)$"), ""),
]


def _roff_unescape(text: str) -> str:
    for pattern, replacement in _ROFF_ESCAPES:
        text = pattern.sub(replacement, text)
    return text


def _roff_arguments(rest: str) -> str:
    """A text macro's arguments: quotes removed, mdoc macro names and lone delimiters dropped."""
    words = [word for word in re.findall(r'"[^"]*"|\S+', rest) if word not in _MDOC_TEXT]
    return " ".join(word.strip('"') for word in words)


def roff_paragraphs(text: str) -> Iterator[str]:
    """The prose of a man page: font and mdoc macros keep their text, other requests break or vanish."""
    lines: list[str] = []
    region_end: str | None = None
    for line in text.splitlines():
        control = line[:1] in (".", "'")
        name, _, rest = line[1:].strip().partition(" ") if control else ("", "", "")
        if region_end is not None:
            if control and name == region_end:
                region_end = None
            continue
        if not control:
            lines.append(line)
        elif name in _ROFF_SKIP_REGIONS and not (name == "Bd" and "-filled" in rest):
            region_end = _ROFF_SKIP_REGIONS[name]
        elif name in _ROFF_TEXT or name in _MDOC_TEXT:
            lines.append(_roff_arguments(rest))
        elif name in _ROFF_BREAKS:
            yield from _joined(lines)
            lines = []
    yield from _joined(lines)


def _joined(lines: list[str]) -> Iterator[str]:
    paragraph = _roff_unescape(" ".join(lines)).strip()
    if paragraph:
        yield paragraph


# --- Perl POD --------------------------------------------------------------------------------------------------
_POD_CODE = re.compile(r"[A-Z]<<+\s(.*?)\s>>+|[A-Z]<([^<>]*)>")


def _pod_unformat(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = _POD_CODE.sub(lambda match: (match.group(1) or match.group(2) or "").split("|")[0], text)
    return text


def pod_paragraphs(text: str) -> Iterator[str]:
    """POD's ordinary paragraphs with formatting codes unwrapped; commands and verbatim (indented) blocks dropped."""
    in_pod, skipping = True, False
    for block in re.split(r"\n\s*\n", text):
        stripped = block.lstrip("\n")
        if stripped.startswith("="):
            command = stripped.split(None, 1)[0]
            in_pod = command != "=cut"
            skipping = command == "=begin" or (skipping and command != "=end")
            continue
        if in_pod and not skipping and stripped and not stripped[:1].isspace():
            yield _pod_unformat(stripped)


# --- dictd dictionaries ----------------------------------------------------------------------------------------
_DICT_NOISE = [
    re.compile(r"\[\s*(?:1913 Webster|WordNet[^\]]*|PJC|Century Dict\.|Obs\.|R\.|Archaic|Colloq\.)[^\]]*\]"),
    re.compile(r"\\[^\\\n]{1,60}\\"),                    # pronunciations \A*buse"\
    re.compile(r"\[(?:[^\[\]]{0,300})\]"),                # etymologies and references in brackets
    re.compile(r"--\s?[A-Z][\w.' ]{0,40}\.?"),            # citations --Shak.
    re.compile(r"<[a-z ,/-]+>"),                              # FOLDOC's <category>
    re.compile(r"\(\d{4}-\d{2}-\d{2}\)"),                 # FOLDOC's dates
    re.compile(r"^\s*(?:\d+\.|\(\w\))\s*"),               # sense numbers
]


def dict_paragraphs(text: str) -> Iterator[str]:
    """A dictd database's definitions: blank-line-separated blocks with headword lines, pronunciations,
    etymologies, citations and ``{cross-reference}`` braces stripped; the ``00-database-*`` entries skipped."""
    for block in re.split(r"\n\s*\n", text):
        if "00-database" in block or "00database" in block:
            continue
        lines = block.strip("\n").splitlines()
        if lines and not lines[0][:1].isspace():
            lines[0] = re.sub(r"^[^\\\[]*\\[^\\]*\\,?\s*(?:[a-z]+\.\s*)*", "", lines[0])  # gcide headword line
        paragraph = " ".join(line.strip() for line in lines).replace("{", "").replace("}", "")
        for pattern in _DICT_NOISE:
            paragraph = pattern.sub(" ", paragraph)
        if paragraph.strip():
            yield paragraph


# --- plain text, reStructuredText, Texinfo ---------------------------------------------------------------------
_RST_ROLE = re.compile(r":[\w:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")
_RST_LINK = re.compile(r"`([^`<]*?)(?:\s*<[^>]*>)?`__?")
_UNDERLINE = re.compile(r"^\s*([=\-~^\"'`#*+:.<>_])\1{2,}\s*$")


def _plain_line(line: str) -> str | None:
    """A prose line with reST inline markup unwrapped, or None for code, directives and underlines."""
    if not line.strip():
        return ""
    expanded = line.expandtabs(8)
    indent = len(expanded) - len(expanded.lstrip())
    if indent >= _INDENTED_CODE or _UNDERLINE.match(line) or line.lstrip().startswith((".. ", "::", "* Menu:", "\x1f")):
        return None
    line = _RST_ROLE.sub(r"\1", line)
    line = _RST_LINK.sub(r"\1", line)
    return line.replace("``", "").replace("**", "")


def plain_paragraphs(text: str) -> Iterator[str]:
    """Blank-line-separated paragraphs of a text file; code (8+ columns of indent), reST directives and
    underlines dropped, reST roles and links unwrapped."""
    lines: list[str] = []
    for raw in text.splitlines():
        line = _plain_line(raw)
        if line:
            lines.append(line)
        elif lines:
            yield " ".join(lines)
            lines = []
    if lines:
        yield " ".join(lines)


def fortune_paragraphs(text: str) -> Iterator[str]:
    """A fortune file's cookies (separated by ``%`` lines), each one paragraph."""
    for cookie in re.split(r"^%\s*$", text, flags=re.MULTILINE):
        if cookie.strip():
            yield " ".join(cookie.split())


def wordnet_paragraphs(text: str) -> Iterator[str]:
    """A WordNet ``data.*`` file's definitions and example sentences, capitalised and ended with a full stop;
    the license header (lines starting with two spaces) skipped."""
    for line in text.splitlines():
        if line.startswith("  ") or not line.strip():
            continue
        synset = parse_data_line(line)
        for sentence in (synset.definition, *synset.examples):
            sentence = sentence.strip()
            if sentence:
                yield sentence[:1].upper() + sentence[1:] + ("" if sentence[-1] in ".!?" else ".")


def description_paragraphs(text: str) -> Iterator[str]:
    """The long descriptions of an APT ``Translation-en`` (or ``Packages``) file: each ``Description-en`` /
    ``Description`` field's continuation lines, split at `` .`` lines; indented lists (2+ spaces) dropped."""
    lines: list[str] = []
    in_description = False
    for line in text.splitlines():
        if line.startswith(("Description-en:", "Description:")):
            in_description = True
            continue
        if in_description and line.startswith(" "):
            if line.strip() == "." or line.startswith("  "):
                if lines:
                    yield " ".join(lines)
                lines = []
            else:
                lines.append(line.strip())
            continue
        in_description = False
        if lines:
            yield " ".join(lines)
        lines = []
    if lines:
        yield " ".join(lines)
