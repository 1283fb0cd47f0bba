"""Docs completeness: the plugin guide shows the tested example, every hook and method is documented."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import adaptemb
from adaptemb import registry

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "tests" / "plugin_example"


def _code_blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", markdown, flags=re.DOTALL)


def test_plugin_guide_shows_exactly_the_tested_example_package() -> None:
    guide = (ROOT / "docs" / "plugins.md").read_text()
    python_blocks = _code_blocks(guide, "python")
    assert (EXAMPLE / "adaptemb_randproj" / "__init__.py").read_text() in python_blocks
    assert (EXAMPLE / "test_randproj.py").read_text() in python_blocks
    assert (EXAMPLE / "pyproject.toml").read_text() in _code_blocks(guide, "toml")


def test_every_hook_has_a_heading_in_the_plugin_guide() -> None:
    guide = (ROOT / "docs" / "plugins.md").read_text()
    hooks = [name for name in dir(registry) if hasattr(getattr(registry, name), "adaptemb_spec")]
    assert hooks, "no hook specs found"
    for hook in hooks:
        assert f"### {hook}" in guide


def test_every_registered_method_has_a_heading_in_the_user_guide() -> None:
    guide = (ROOT / "docs" / "guide.md").read_text()
    for name in adaptemb.get_registry().names():
        assert re.search(rf"^### `{name}`", guide, flags=re.MULTILINE), f"docs/guide.md lacks a '### `{name}`' section"


def test_readme_has_the_two_commands_and_ci_runs_the_second() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = _code_blocks(readme, "bash")
    assert len(commands) >= 2 and "adaptemb bench" in commands[0]
    test_command = commands[1].strip()
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()


NEW_KIND_CHECKS = textwrap.dedent("""
    import pathlib, tempfile, types
    import adaptemb

    docs = NibbleCodes.quantize(np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32),
                                np.full(8, 0.5, np.float32))
    assert adaptemb.Codes.for_kind("nibble") is NibbleCodes and docs.bytes_per_vector == 4.0 and docs.nbytes == 192
    adaptemb.register_plugin(types.SimpleNamespace(register_index_backends=register_index_backends), name="nibble")
    scores, ids = adaptemb.build_index(docs).search(docs[:5], 3)
    assert (ids == np.argsort(-docs[:5].similarity(docs), axis=1, kind="stable")[:, :3]).all()
    with tempfile.TemporaryDirectory() as folder:
        back = adaptemb.load_codes(adaptemb.save_codes(docs, pathlib.Path(folder) / "codes.npz"))
    assert np.array_equal(back.to_dense(), docs.to_dense()) and set(docs.row_columns()) == {"packed"}
    print("nibble ok")
""")


@pytest.mark.slow
def test_the_new_code_kind_of_the_plugin_guide_works() -> None:
    """The guide's example kind and its backend: registered, searched, saved and loaded. In a fresh process: a
    kind registers for the whole process, and this one is no kind of adaptemb's."""
    guide = (ROOT / "docs" / "plugins.md").read_text()
    (block,) = [code for code in _code_blocks(guide, "python") if 'kind = "nibble"' in code]
    done = subprocess.run([sys.executable, "-c", block + NEW_KIND_CHECKS], check=False, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "nibble ok", done.stderr


@pytest.mark.parametrize(("path", "limit"), [("README.md", 120), ("docs/results.md", 400)])
def test_the_readme_and_the_results_stay_short(path: str, limit: int) -> None:
    """Issue 43's standing bar: a README of at most 120 lines and current results of at most 400 (dated re-runs
    belong in benchmarks/results/HISTORY.md)."""
    lines = (ROOT / path).read_text().splitlines()
    assert len(lines) <= limit, f"{path} has {len(lines)} lines; keep it at most {limit} (move history to HISTORY.md)"
    assert not re.search(r"^\*\*Update \(\d{4}-\d{2}-\d{2}\)", "\n".join(lines), flags=re.MULTILINE)
