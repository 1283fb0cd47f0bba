"""Every import is declared: what a plain ``pip install adaptemb`` (no extras) loads comes from its runtime
dependencies, and every other third-party import from an extra. A fresh virtual environment proves it."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).parent.parent
FIRST_PARTY = {"adaptemb", "adaptemb_plugins"}
SOURCES = [*sorted((ROOT / "adaptemb").rglob("*.py")), *sorted((ROOT / "plugins").rglob("*.py"))]
# What the command line and the registry import at start-up, with no extra installed.
STARTUP = "import adaptemb, adaptemb.cli; adaptemb.list_compressors(); import sys, json; print(json.dumps(sorted(sys.modules)))"


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``"ray[data]>=2.9"`` → ``"ray"``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()  # type: ignore[union-attr]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _runtime_closure() -> set[str]:
    """The runtime dependencies and, recursively, what they require without extras (markers evaluated here)."""
    from packaging.requirements import Requirement

    pending, seen = [Requirement(r) for r in _project()["dependencies"]], set()
    while pending:
        requirement = pending.pop()
        name = _name(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            pending += [Requirement(r) for r in metadata.requires(requirement.name) or []]
        except metadata.PackageNotFoundError:
            continue
    return seen


@functools.cache
def _providers() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The installed distributions that provide the top-level module ``module``."""
    return {_name(d) for d in _providers().get(module, [])}


def _third_party(modules: set[str]) -> set[str]:
    return {m for m in modules if m not in sys.stdlib_module_names and m not in FIRST_PARTY and not m.startswith("_")}


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports anywhere (absolute imports only)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return set().union(*(_imports_of(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))))


def _import_time_imports(path: Path) -> set[str]:
    """Top-level names ``path`` imports when it is imported: module and class bodies, not function bodies, and not
    the body of a ``try`` that handles ``ImportError`` (an optional import)."""
    names: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Try) and any(_handles_import_error(h) for h in node.handlers):
                visit(node.orelse + node.finalbody)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(_imports_of(node))
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit([n for n in getattr(node, field, []) if isinstance(n, ast.stmt)])
            for handler in getattr(node, "handlers", []):
                visit(handler.body)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return names


def _handles_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(c, ast.Name) and c.id in ("ImportError", "ModuleNotFoundError") for c in caught)


def _imports_of(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    return {node.module.split(".")[0]} if node.level == 0 and node.module else set()


@pytest.mark.slow
def test_what_starts_without_extras_comes_from_runtime_dependencies() -> None:
    """The modules of ``adaptemb``, its CLI and every registered plugin that load at start-up import only runtime
    dependencies, declared directly, when they load: ``click`` imported by the CLI while typer no longer required
    it crashed a fresh install (what a dependency requires today is not ours to count on)."""
    loaded = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, check=True, cwd=ROOT)
    started = json.loads(loaded.stdout.splitlines()[-1])
    files = [_source_of(name) for name in started if name.split(".")[0] in FIRST_PARTY]
    direct = {_name(r) for r in _project()["dependencies"]}  # not what they require: that may change under us
    undeclared = {}
    for path in filter(None, files):
        for module in _third_party(_import_time_imports(path)):
            if not _distributions(module) & direct:
                undeclared[f"{path.relative_to(ROOT)}: {module}"] = sorted(_distributions(module))
    assert files and not undeclared, f"imported at start-up but not a runtime dependency: {undeclared}"


def _source_of(module: str) -> Path | None:
    parts = module.split(".")
    base = ROOT / ("plugins" if parts[0] == "adaptemb_plugins" else "adaptemb")
    for candidate in (base.joinpath(*parts[1:], "__init__.py"), base.joinpath(*parts[1:]).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@pytest.mark.slow
def test_every_third_party_import_is_declared() -> None:
    """Any other import (an encoder, ONNX, a vector database, Ray) belongs to a runtime dependency or an extra."""
    project = _project()
    declared = _runtime_closure() | {_name(r) for extra in project["optional-dependencies"].values() for r in extra}
    undeclared = {}
    for path in SOURCES:
        for module in _third_party(_imports(path)):
            dists = _distributions(module)
            assert dists, f"{path.relative_to(ROOT)} imports {module!r}, which no installed distribution provides"
            if not dists & declared:
                undeclared[f"{path.relative_to(ROOT)}: {module}"] = sorted(dists)
    assert not undeclared, f"imports of packages not declared in pyproject.toml: {undeclared}"


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    result = subprocess.run(command, check=False, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_fresh_install_without_extras_runs_the_cli(tmp_path: Path) -> None:
    """``pip install .`` into a new virtual environment (no extras, nothing inherited), then ``adaptemb --help``,
    ``adaptemb plugins`` and a small bench on the shipped dataset, as a new user would. Needs the package index
    the README's commands use (PyPI or a mirror); about 6 GB in the temporary folder while it runs."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # --no-compile: byte-compiling torch's files took a third of the install (133 -> 86 s here); a broken module
    # still fails at import, and compiling reports no error pip would fail on
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-compile", str(ROOT)], env=environ, cwd=tmp_path)
    adaptemb = str(bin_dir / "adaptemb")
    environ["COLUMNS"] = "100"
    assert "Usage: adaptemb" in _run([adaptemb, "--help"], env=environ, cwd=tmp_path).stdout
    plugins = _run([adaptemb, "plugins"], env=environ, cwd=tmp_path).stdout
    assert all(name in plugins for name in ("csr", "svd", "int8", "opq"))
    bench = _run([adaptemb, "bench", "--methods", "svd,int8,binary", "--bytes", "32,64", "--rounds", "1",
                  "--out", str(tmp_path / "bench"), "--quiet"], env=environ, cwd=tmp_path)
    assert "recommendation" in bench.stdout and (tmp_path / "bench" / "results.json").is_file()
