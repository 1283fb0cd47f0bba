"""Packaging: every package directory ships, and plugins/ ships as adaptemb_plugins."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).parent.parent


def _declared_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def test_every_package_directory_is_declared() -> None:
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "adaptemb").rglob("__init__.py")
    }
    found |= {
        ".".join(("adaptemb_plugins", *path.parent.relative_to(ROOT / "plugins").parts))
        for path in (ROOT / "plugins").rglob("__init__.py")
    }
    assert found == _declared_packages()


def test_builtin_plugins_are_entry_points_of_modules_that_exist() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for name, target in config["project"]["entry-points"]["adaptemb"].items():
        module = ROOT / "plugins" / target.removeprefix("adaptemb_plugins.").replace(".", "/")
        assert module.with_suffix(".py").is_file() or (module / "__init__.py").is_file(), name


@pytest.mark.slow
def test_wheel_ships_core_plugins_data_and_type_marker(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("adaptemb-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "adaptemb/py.typed" in names and "adaptemb/testing/__init__.py" in names
    assert {"adaptemb_plugins/svd.py", "adaptemb_plugins/int8.py", "adaptemb_plugins/binary.py", "adaptemb_plugins/mrl.py"} <= names
    assert not any(name.startswith(("plugins/", "tests/")) for name in names)
    assert any(name.startswith("adaptemb/datasets/data/") and name.endswith(".npz") for name in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[adaptemb]" in text and "svd = adaptemb_plugins.svd" in text
