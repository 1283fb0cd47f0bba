"""The import layering of the package: arrows only go down, and plugins and benchmarks use the public API only.

A *room* is a subpackage of ``adaptemb/`` (``adaptemb.codes``), a top-level module of it (``adaptemb.api``), the
package's own ``__init__`` (the public API, room ``adaptemb``), ``plugins/`` (``adaptemb_plugins``) or
``benchmarks/``. No two rooms import each other, directly or around a loop, and every room imports only rooms of
its own layer or below (``LAYERS``, drawn in ``docs/architecture.md``). No two modules do either.

Every ``import`` statement counts, at module level, inside functions and under ``TYPE_CHECKING`` alike:
an import placed in a function to dodge a circle is still a circle. The one thing loaded by name is what plugins
are: entry points, and the core's own plugins (``BUILTIN_PLUGINS``), which nothing imports.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: Path, name: str) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.cache
def _imports(source: str) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """Every import statement of a file's source (each source parsed once per test session)."""
    return tuple(node for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that ``module`` imports (a name imported from a package counts as that submodule
    when it is one, else as the package)."""
    targets: set[str] = set()
    for node in _imports(path.read_text()):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_core() -> None:
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and "adaptemb.compressor" in graph["adaptemb.api"]
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


LAYERS: tuple[tuple[str, frozenset[str]], ...] = tuple((name, frozenset(rooms.split())) for name, rooms in (
    ("foundations", "errors _version validation linalg ranking devices threads progress capabilities losses"),
    ("forms: code kinds, input kinds, file readers, configs, budgets, backbones", "io codes inputs config budgets encoders"),
    ("storage, rows and training", "serialization data rows batches fitting train"),
    ("the parts of a compressor and what sits beside them", "compressor index onnx vectordb datasets"),
    ("the registry", "registry"),
    ("search over a compressor's codes", "indexing ann"),
    ("the public Compressor", "method"),
    ("compositions", "compose"),
    ("the one-call api", "api"),
    ("pipelines over fitted compressors", "streaming encoder_export index_build"),
    ("the public API", "adaptemb"),
    ("the contract suite and the bench", "testing pytest_plugin evaluate"),
    ("the command line", "cli __main__"),
    ("the built-in plugins", "adaptemb_plugins"),
    ("benchmarks", "benchmarks"),
))
"""The rooms from the bottom up: a room imports rooms of its own layer or below, never above."""


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "adaptemb" and len(parts) > 1 else parts[0]


def _rooms() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Every module of the core, the plugins and the benchmarks, and the room graph of their imports."""
    modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "plugins", "adaptemb_plugins"),
                            (ROOT / "benchmarks", "benchmarks"))
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(_room(module), set()).update(_room(target) for target in targets)
    return modules, {room: targets - {room} for room, targets in rooms.items()}


def test_no_two_rooms_import_each_other() -> None:
    """Rooms, not only modules: no two import each other, directly or around a loop."""
    _, rooms = _rooms()
    assert {"api", "compose", "method", "onnx", "index", "registry", "adaptemb_plugins", "benchmarks"} <= set(rooms)
    assert _cycles(rooms) == []


def test_every_room_sits_in_one_layer_and_imports_only_down() -> None:
    _, rooms = _rooms()
    layer = {room: level for level, (_, members) in enumerate(LAYERS) for room in members}
    assert set(rooms) <= set(layer), f"rooms without a layer: {sorted(set(rooms) - set(layer))}"
    assert sum(len(members) for _, members in LAYERS) == len(layer), "a room stands in two layers"
    upward = sorted(f"{room} ({LAYERS[layer[room]][0]}) -> {target} ({LAYERS[layer[target]][0]})"
                    for room, targets in rooms.items() for target in targets if layer[target] > layer[room])
    assert not upward, upward


def test_the_room_checks_see_a_loop_through_a_function_level_import(tmp_path: Path) -> None:
    """An import inside a function from a lower room back up (``index`` -> ``registry``) makes a loop."""
    (tmp_path / "adaptemb" / "index").mkdir(parents=True)
    (tmp_path / "adaptemb" / "__init__.py").write_text("")
    (tmp_path / "adaptemb" / "index" / "__init__.py").write_text("def f():\n    from adaptemb.registry import x\n")
    (tmp_path / "adaptemb" / "registry.py").write_text("from adaptemb.index import f\n")
    _, graph = _graph((tmp_path / "adaptemb", "adaptemb"))
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(_room(module), set()).update(_room(target) for target in targets if _room(target) != _room(module))
    assert _cycles(rooms) == [["index", "registry"]]


def test_the_core_plugins_are_loaded_by_name_and_imported_by_nothing() -> None:
    """``BUILTIN_PLUGINS`` (the composer of ``"a+b"``) sit above the registry that loads them by name, as entry
    points do: each registers through the registry's hook, and no module imports one (so none is reached
    through an import, and no import order decides whether it is there)."""
    from adaptemb.registry.manager import BUILTIN_PLUGINS

    modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "plugins", "adaptemb_plugins"),
                            (ROOT / "benchmarks", "benchmarks"))
    assert "adaptemb.compose.plugin" in BUILTIN_PLUGINS.values()
    for module in BUILTIN_PLUGINS.values():
        assert module in modules and any(_room(target) == "registry" for target in graph[module]), module
        importers = sorted(name for name, targets in graph.items() if module in targets)
        assert not importers, f"{module} is imported by {importers}"


def _package(modules: dict[str, Path], name: str) -> set[str]:
    return {module for module in modules if module == name or module.startswith(f"{name}.")}


def test_onnx_is_one_package_below_the_compressor() -> None:
    """ONNX export lives in ``adaptemb.onnx``, below the public ``Compressor`` (which mixes
    ``adaptemb.onnx.head.OnnxExport`` in): nothing there imports a compressor, the registry or the api. The core
    ``compressor`` imports none of it, and the head mixin imports no backbone. A backbone composed with a fitted
    compressor (``export_encoder``) is ``adaptemb.encoder_export``, above the api."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    onnx = _package(modules, "adaptemb.onnx")
    assert {"adaptemb.onnx.head", "adaptemb.onnx.parity", "adaptemb.onnx.sessions"} <= onnx
    assert "adaptemb.export" not in modules and "adaptemb.encoders.onnx" not in modules
    assert "adaptemb.onnx.encoder" not in modules and "adaptemb.encoder_export" in modules
    assert not _imported("adaptemb.compressor", modules["adaptemb.compressor"], modules) & onnx
    above = _within(modules, "adaptemb.compressor", "adaptemb.method", "adaptemb.registry", "adaptemb.api")
    for module in onnx:
        assert not _imported(module, modules[module], modules) & above, module
    head = _imported("adaptemb.onnx.head", modules["adaptemb.onnx.head"], modules)
    assert not head & {"adaptemb.onnx", "adaptemb.onnx.backbones"}


def test_encoders_sit_below_datasets() -> None:
    """Datasets embed with the encoders; the encoders (backbones only) and the ONNX export import no dataset."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    datasets = _package(modules, "adaptemb.datasets")
    assert "adaptemb.encoders.image" in _imported(
        "adaptemb.datasets.fashion_mnist", modules["adaptemb.datasets.fashion_mnist"], modules)
    for module in _package(modules, "adaptemb.encoders") | _package(modules, "adaptemb.onnx"):
        assert not _imported(module, modules[module], modules) & datasets, module


def test_file_readers_sit_at_the_bottom() -> None:
    """``adaptemb.io`` (one reader per file format) is used by data, rows, streaming and datasets, and imports
    nothing of adaptemb but its errors."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    readers = {name for name in modules if name == "adaptemb.io" or name.startswith("adaptemb.io.")}
    assert {"adaptemb.io.readers", "adaptemb.io.safetensors"} <= readers
    for module in readers:
        assert _imported(module, modules[module], modules) <= readers | {"adaptemb.errors"}, module
    for user in ("adaptemb.data", "adaptemb.rows", "adaptemb.streaming", "adaptemb.datasets.formats"):
        assert "adaptemb.io" in _imported(user, modules[user], modules), user


def test_plugins_import_only_the_public_api() -> None:
    """A plugin writes ``from adaptemb import X``, never ``from adaptemb.<module> import X``."""
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            internal = [name for name in names if name.startswith("adaptemb.")]
            assert not internal, f"{path.name} imports {internal}; import from the top-level adaptemb package"


def _within(modules: dict[str, Path], *packages: str) -> set[str]:
    return set().union(*(_package(modules, name) for name in packages))


def test_the_core_compressor_sits_below_what_it_is_composed_with() -> None:
    """``adaptemb.compressor`` (the contract: config, declared capabilities, fit, encode, decode, budgets) and the
    modules it uses import nothing that searches, saves, exports, registers, embeds raw inputs or streams: those
    mix into the public ``Compressor`` in ``adaptemb.method``, the one module above them all."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    above = _within(modules, "adaptemb.index", "adaptemb.onnx", "adaptemb.encoders", "adaptemb.cli",
                    "adaptemb.evaluate", "adaptemb.datasets", "adaptemb.registry", "adaptemb.serialization",
                    "adaptemb.streaming", "adaptemb.vectordb", "adaptemb.api", "adaptemb.method", "adaptemb.testing", "adaptemb.export")
    for module in ("adaptemb.compressor", "adaptemb.fitting", "adaptemb.budgets", "adaptemb.config"):
        assert not _imported(module, modules[module], modules) & above, module
    composed = _imported("adaptemb.method", modules["adaptemb.method"], modules)
    assert {"adaptemb.compressor", "adaptemb.indexing", "adaptemb.serialization", "adaptemb.onnx.head"} <= composed
    for mixin in ("adaptemb.indexing", "adaptemb.serialization", "adaptemb.onnx.head"):
        assert not _imported(mixin, modules[mixin], modules) & {"adaptemb.compressor", "adaptemb.method"}, mixin


def test_codes_import_nothing_above_them() -> None:
    """Codes are the bottom layer: they know their storage and scoring, nothing of compressors or indexes."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    codes = _within(modules, "adaptemb.codes")
    allowed = codes | {"adaptemb.errors", "adaptemb.validation", "adaptemb.linalg", "adaptemb.ranking"}
    for module in codes:
        assert _imported(module, modules[module], modules) <= allowed, module


def test_the_public_api_plugins_import_holds_no_cli_or_bench() -> None:
    """Plugins import ``adaptemb`` only (above); that package imports no command line and no evaluation."""
    modules = _modules(ROOT / "adaptemb", "adaptemb")
    assert not _imported("adaptemb", modules["adaptemb"], modules) & _within(modules, "adaptemb.cli", "adaptemb.evaluate")


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through the modules it imports."""
    seen, todo = set(), [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def _graph(*packages: tuple[Path, str]) -> tuple[dict[str, Path], dict[str, set[str]]]:
    modules = {name: path for folder, prefix in packages for name, path in _modules(folder, prefix).items()}
    return modules, {name: _imported(name, path, modules) for name, path in modules.items()}


def test_plugins_reach_no_command_line_and_no_evaluation() -> None:
    """A plugin needs the library, never the command line or the bench: no plugin imports ``adaptemb.cli`` or
    ``adaptemb.evaluate``, directly or through what it imports."""
    modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "plugins", "adaptemb_plugins"))
    forbidden = _within(modules, "adaptemb.cli", "adaptemb.evaluate")
    plugins = _package(modules, "adaptemb_plugins") - {"adaptemb_plugins"}
    assert {"adaptemb_plugins.cllr", "adaptemb_plugins.csr"} <= plugins and "adaptemb.cli.bench" in forbidden
    for plugin in plugins:
        assert not _reached(graph, plugin) & forbidden, plugin


def test_benchmarks_use_no_command_line_module() -> None:
    """Benchmarks are scripts over the public library: what they need of the command line (``parse_params``)
    lives in the core; no benchmark imports ``adaptemb.cli``, directly or through what it imports."""
    modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "benchmarks", "benchmarks"))
    cli = _package(modules, "adaptemb.cli")
    benchmarks = _package(modules, "benchmarks")
    assert "benchmarks.cllr_bar" in benchmarks and "adaptemb.config" in _reached(graph, "benchmarks.cllr_bar")
    for benchmark in benchmarks:
        assert not _reached(graph, benchmark) & cli, benchmark


BENCHMARKS_KEEP_OUT = ("adaptemb_plugins", "adaptemb.compose", "adaptemb.onnx", "adaptemb.index", "adaptemb.codes",
                      "adaptemb.vectordb", "adaptemb.io")
"""What a benchmark never imports: a plugin, or a module of these core packages (it uses what ``adaptemb``
exports, as a user would)."""


def _private_imports(graph: dict[str, set[str]], module: str) -> list[str]:
    return sorted(target for target in graph[module]
                  if any(target == name or target.startswith(f"{name}.") for name in BENCHMARKS_KEEP_OUT))


def test_benchmarks_use_the_public_api() -> None:
    """No benchmark imports ``adaptemb_plugins`` or a module inside ``compose/``, ``onnx/``, ``index/``, ``codes/``,
    ``vectordb/`` or ``io/`` (at module level or in a function): what it needs of them ``adaptemb`` exports."""
    modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "plugins", "adaptemb_plugins"),
                            (ROOT / "benchmarks", "benchmarks"))
    benchmarks = _package(modules, "benchmarks")
    assert {"benchmarks.onnx_encoder_speed", "benchmarks.tq_parity", "benchmarks.rotation_choice"} <= benchmarks
    found = {benchmark: _private_imports(graph, benchmark) for benchmark in benchmarks}
    assert not {name: targets for name, targets in found.items() if targets}


def test_the_benchmark_check_sees_private_imports(tmp_path: Path) -> None:
    lines = ("from adaptemb.compose.rotation import fit_rotation", "from adaptemb import codes",
             "import adaptemb_plugins.tq", "def f():\n    from adaptemb.index.sparse import torch_csr")
    for line in lines:
        (tmp_path / "script.py").write_text(f"{line}\n")
        _, graph = _graph((ROOT / "adaptemb", "adaptemb"), (ROOT / "plugins", "adaptemb_plugins"), (tmp_path, "scripts"))
        assert _private_imports(graph, "scripts.script"), line
    (tmp_path / "script.py").write_text("from adaptemb import Rotation, compare_codes\nfrom adaptemb.datasets import Dataset\n")
    _, graph = _graph((ROOT / "adaptemb", "adaptemb"), (tmp_path, "scripts"))
    assert _private_imports(graph, "scripts.script") == []


def test_the_layer_checks_see_an_import_of_the_command_line(tmp_path: Path) -> None:
    """The two checks above would catch ``from adaptemb.cli.models import parse_params`` and ``from adaptemb import cli``."""
    for line in ("from adaptemb.cli.models import parse_params", "from adaptemb import cli", "import adaptemb.cli"):
        (tmp_path / "script.py").write_text(f"{line}\n")
        modules, graph = _graph((ROOT / "adaptemb", "adaptemb"), (tmp_path, "scripts"))
        assert _reached(graph, "scripts.script") & _package(modules, "adaptemb.cli"), line
