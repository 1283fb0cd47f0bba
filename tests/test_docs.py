"""Docs completeness: the plugin guide shows the tested example, every hook and method is documented."""

import re
from pathlib import Path

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
