"""The Debian sentence corpus builder (benchmarks/debian_*.py): readers, splitter, filters, dedup, merge, resumable
embedding and the loader, on hand-written snippets and on WordNet's files where they are installed. No network."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from debian_corpus import load, minilm_name, split_entry, write_split
from debian_embed import embed_in_chunks
from debian_formats import (
    description_paragraphs,
    dict_paragraphs,
    html_paragraphs,
    plain_paragraphs,
    pod_paragraphs,
    roff_paragraphs,
)
from debian_sources import deb_version, merge_sentences
from debian_text import Deduplicator, keep_sentence, package_sentences, sentences_of, split_sentences


def test_split_sentences_keeps_abbreviations_and_initials_together() -> None:
    text = 'Dr. Smith, i.e. the author, met J. Doe.  "Is it done?" she asked (see Fig. 2). It is!\nNext one.'
    assert split_sentences(text) == ["Dr. Smith, i.e. the author, met J. Doe.", '"Is it done?" she asked (see Fig. 2).',
                                     "It is!", "Next one."]
    assert split_sentences("Version 3.11 is out. 2 bugs were fixed.") == ["Version 3.11 is out.", "2 bugs were fixed."]


@pytest.mark.parametrize(("sentence", "kept"), [
    ("The parser reads every file in the folder.", True),
    ('He said "the file is gone."', True),
    ("Too short to keep.", False),                                           # 4 words
    ("The parser reads every file in the folder", False),                    # no full stop
    (" ".join(["word"] * 30 + ["the"] * 31) + ".", False),                   # 61 words
    ("The value of x is set to {a: 1} in the code.", False),                # code token
    ("If x == 1 then the loop ends at once.", False),
    ("Der Parser liest jede Datei im Ordner und schreibt sie.", False),      # not English
    ("The 0 1 2 3 4 5 6 7 8 9 10 11 12 is a list.", False),                  # mostly digits
    ("The café naïve résumé déjà été piñata is here.", False),              # too many non-ASCII letters
])
def test_keep_sentence_filters(sentence: str, kept: bool) -> None:
    assert keep_sentence(sentence) is kept


def test_html_paragraphs_drop_code_tables_and_scripts() -> None:
    page = """<html><head><title>T</title><script>var x = 1;</script></head><body>
    <h1>Heading</h1><p>The first paragraph &amp; its <code>inline</code> code.</p>
    <pre>for i in range(3): print(i)</pre><table><tr><td>a cell of the table</td></tr></table>
    <div>Second <b>block</b> here.<br>After a break.</div></body></html>"""
    paragraphs = [" ".join(p.split()) for p in html_paragraphs(page) if p.strip()]
    assert paragraphs == ["Heading", "The first paragraph & its inline code.", "Second block here.", "After a break."]


def test_roff_paragraphs_strip_requests_escapes_and_examples() -> None:
    page = r""".\" a comment that is not prose
.TH LS 1 2024 "GNU" "User Commands"
.SH NAME
ls \- list directory contents
.SH DESCRIPTION
List information about the \fBFILEs\fR (the current
directory by default).
.B Sort
entries alphabetically if none of the options is given.
.nf
ls \-la /tmp
.fi
.PP
Mandatory arguments to long options are mandatory for short options too.
"""
    assert list(roff_paragraphs(page)) == [
        "ls - list directory contents",
        ("List information about the FILEs (the current directory by default). Sort entries alphabetically if "
         "none of the options is given."),
        "Mandatory arguments to long options are mandatory for short options too."]


def test_roff_paragraphs_read_mdoc_inline_macros() -> None:
    page = (".Sh DESCRIPTION\nThe\n.Nm cat\nutility reads files in order, see\n.Xr head 1 .\n"
            ".Bd -literal\ncat -n x\n.Ed\n")
    assert list(roff_paragraphs(page)) == ["The cat utility reads files in order, see head 1 ."]


def test_pod_paragraphs_unwrap_codes_and_drop_verbatim() -> None:
    pod = ("=head1 NAME\n\nperlfunc - Perl builtin functions\n\n=head1 DESCRIPTION\n\nThe functions in "
           "B<this section> can serve as terms in an L<expression|perlop>.\n\n    my $x = 1;\n\n=begin html\n\n"
           "<p>raw</p>\n\n=end html\n\nUse C<< $x->y >> with care.\n\n=cut\n\nsub f { 1 }\n")
    assert list(pod_paragraphs(pod)) == ["perlfunc - Perl builtin functions",
                                         "The functions in this section can serve as terms in an expression.",
                                         "Use $x->y with care."]


def test_dict_paragraphs_strip_headwords_pronunciations_and_citations() -> None:
    entry = ("Abuse \\A*buse\"\\, v. t. [F. abuser; L. abusus.]\n   1. To put to a wrong or improper use; to misuse.\n"
             "      [1913 Webster]\n\n            This principle shoots rapidly into popularity.   --Froude.\n"
             "      [1913 Webster]\n\n00-database-info\n   This file was converted from the original database.\n")
    assert list(sentences_of(dict_paragraphs(entry))) == ["To put to a wrong or improper use; to misuse.",
                                                          "This principle shoots rapidly into popularity."]


def test_plain_paragraphs_unwrap_rest_and_drop_code() -> None:
    text = ("Title\n=====\n\nUse :func:`open` to read the `file <https://x>`_ you need.\n"
            "The ``mode`` is text.\n\n.. note::\n\n        code_block(that, is, indented)\n\nLast one.\n")
    assert list(plain_paragraphs(text)) == ["Title", "Use open to read the file you need. The mode is text.",
                                            "Last one."]


def test_description_paragraphs_read_long_descriptions() -> None:
    text = ("Package: a\nDescription-md5: 0\nDescription-en: short summary\n The long text starts here and\n"
            " goes on.\n .\n A second paragraph.\n  * an indented list item\n\nPackage: b\n"
            "Description-en: other\n Only line.\n")
    assert list(description_paragraphs(text)) == ["The long text starts here and goes on.", "A second paragraph.",
                                                  "Only line."]


def test_deduplicator_is_case_insensitive() -> None:
    seen = Deduplicator()
    assert [seen.is_new(s) for s in ("The cat sat.", "the CAT sat.", "The dog sat.", "The cat sat.")] == [
        True, False, True, False]
    assert len(seen) == 2 and seen.offered == 4


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_package_sentences_skip_sources_other_languages_and_duplicates(tmp_path: Path) -> None:
    html = "<p>The library reads every file of the folder in order. " * 2 + "</p>"
    _write(tmp_path / "usr/share/doc/p/html/index.html", html)
    _write(tmp_path / "usr/share/doc/p/html/_sources/index.rst.txt", "A source sentence that should be skipped here.\n")
    _write(tmp_path / "usr/share/doc/p/html/de-DE/index.html", "<p>The German tree is skipped by its folder name.</p>")
    with gzip.open(tmp_path / "usr/share/doc/p/notes.txt.gz", "wt") as handle:
        handle.write("This gzipped text file is read like any other.\n")
    seen = Deduplicator()
    assert list(package_sentences(tmp_path, seen)) == ["The library reads every file of the folder in order.",
                                                       "This gzipped text file is read like any other."]
    assert seen.offered == 3


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.verb").is_file(), reason="wordnet-base is not installed")
def test_wordnet_files_give_definitions_and_examples(tmp_path: Path) -> None:
    folder = tmp_path / "usr/share/wordnet"
    folder.mkdir(parents=True)
    (folder / "data.verb").write_bytes(Path("/usr/share/wordnet/data.verb").read_bytes())
    sentences = list(package_sentences(tmp_path))
    assert 15_000 < len(sentences) < 25_000
    assert "Draw air into, and expel out of, the lungs." in sentences
    assert "I can breathe better when the air is clean." in sentences


def _write_package(out: Path, package: str, sentences: list[str]) -> None:
    folder = out / "sentences"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / f"{package}.txt.gz", "wt") as handle:
        handle.writelines(s + "\n" for s in sentences)


def test_merge_deduplicates_across_packages_shuffles_and_cuts(tmp_path: Path) -> None:
    _write_package(tmp_path, "a", [f"Sentence number {i} of package a." for i in range(10)])
    _write_package(tmp_path, "b", ["SENTENCE NUMBER 3 OF PACKAGE A.", "A sentence only package b has."])
    texts, summary = merge_sentences(["a", "b"], tmp_path, 8, seed=0)
    table = pq.read_table(tmp_path / "sentences.parquet").to_pydict()
    assert summary["distinct"] == 11 and summary["duplicates_across_packages"] == 1 and summary["rows"] == 8
    assert table["id"] == list(range(8)) and table["text"] == texts and len(set(texts)) == 8
    assert sum(summary["per_source_kept"].values()) == 8 and summary["per_source_read"] == {"a": 10, "b": 2}
    assert "SENTENCE NUMBER 3 OF PACKAGE A." not in texts
    assert merge_sentences(["a", "b"], tmp_path, 8, seed=0)[0] == texts          # the finished stage is reused
    with pytest.raises(SystemExit, match="other settings"):
        merge_sentences(["a", "b"], tmp_path, 9, seed=0)


def _encoder(batch: list[str]) -> np.ndarray:
    """A deterministic stand-in encoder: each text's letter counts (not normalised, to test the normalisation)."""
    return np.array([[text.count(c) + 1 for c in "abcdefgh"] for text in batch], dtype=np.float64)


def test_embedding_resumes_after_an_interruption(tmp_path: Path) -> None:
    texts = [f"text {i} " + "abcdefgh"[: i % 8] * (i % 5) for i in range(103)]
    whole = tmp_path / "whole.npy"
    embed_in_chunks(texts, _encoder, whole, 8, chunk_rows=10)
    path = tmp_path / "resumed.npy"
    first = embed_in_chunks(texts, _encoder, path, 8, chunk_rows=10, stop_after_chunks=3)
    assert first == {"rows": 103, "embedded": 30, "complete": False} and not path.exists()
    assert json.loads((tmp_path / "resumed.progress.json").read_text())["rows_done"] == 30
    second = embed_in_chunks(texts, _encoder, path, 8, chunk_rows=10)
    assert second["embedded"] == 73 and second["complete"] and second["resumed_from"] == 30
    assert second["seconds_total"] >= second["seconds"] and second["rows_per_second_total"] > 0
    assert not (tmp_path / "resumed.partial.npy").exists() and not (tmp_path / "resumed.progress.json").exists()
    result = np.load(path)
    assert result.dtype == np.float32 and result.shape == (103, 8)
    np.testing.assert_array_equal(result, np.load(whole))
    np.testing.assert_allclose(np.linalg.norm(result, axis=1), 1.0, rtol=1e-6)
    expected = _encoder(texts[:1])[0]
    np.testing.assert_allclose(result[0], expected / np.linalg.norm(expected), rtol=1e-6)


def test_embedding_refuses_a_foreign_progress_file_and_bad_vectors(tmp_path: Path) -> None:
    path = tmp_path / "e.npy"
    embed_in_chunks(["a b c"] * 30, _encoder, path, 8, chunk_rows=10, stop_after_chunks=1)
    with pytest.raises(ValueError, match="belongs to another run"):
        embed_in_chunks(["x y z"] * 30, _encoder, path, 8, chunk_rows=10)
    with pytest.raises(ValueError, match="NaN"):
        embed_in_chunks(["a"] * 5, lambda batch: np.full((len(batch), 8), np.nan), tmp_path / "n.npy", 8)
    with pytest.raises(ValueError, match=r"shape \(5, 4\)"):
        embed_in_chunks(["a"] * 5, lambda batch: np.ones((len(batch), 4)), tmp_path / "s.npy", 8)


def test_split_and_load_give_held_out_queries_as_memmaps(tmp_path: Path) -> None:
    matrix = np.arange(2000 * 4, dtype=np.float32).reshape(2000, 4)
    np.save(tmp_path / "static-256.npy", matrix)
    np.save(tmp_path / f"{minilm_name(500)}.npy", matrix[:500])
    write_split(tmp_path, 2000, 500)
    split = json.loads((tmp_path / "split.json").read_text())
    split["static-256"]["dim"] = split["minilm-384-500"]["dim"] = 4            # the stand-in files are 4-d
    (tmp_path / "split.json").write_text(json.dumps(split))
    corpus, queries, fit = load(tmp_path, "static-256")
    assert (corpus.shape, queries.shape, fit.shape) == ((1800, 4), (200, 4), (1800, 4))
    assert isinstance(corpus, np.memmap)
    np.testing.assert_array_equal(queries, matrix[1800:])
    corpus, queries, fit = load(tmp_path, "minilm-384-500")
    assert (corpus.shape, queries.shape) == ((450, 4), (50, 4))
    assert split_entry("x.npy", 1_000_000, 256, 10_000)["fit_sample"] == [0, 100_000]
    with pytest.raises(ValueError, match="unknown embedding 'minilm'"):
        load(tmp_path, "minilm")
    with pytest.raises(FileNotFoundError, match="build the corpus first"):
        load(tmp_path / "missing")


def test_deb_version_reads_the_file_name() -> None:
    assert deb_version(Path("perl-doc_5.36.0-7%2bdeb12u2_all.deb")) == "5.36.0-7+deb12u2"
    assert deb_version(Path("x_1%3a2.0-1_amd64.deb")) == "1:2.0-1"
