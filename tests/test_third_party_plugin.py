"""A real third-party package (tests/plugin_example, the docs' example) installed with pip."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent / "plugin_example"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("site-packages")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(EXAMPLE)],
        check=True, capture_output=True, text=True, cwd=build,
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}


def _run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, cwd=cwd, check=False)


def test_installed_plugin_appears_in_adaptemb_plugins(plugin_env: dict[str, str]) -> None:
    result = _run(["-m", "adaptemb", "plugins"], plugin_env)
    assert result.returncode == 0, result.stderr
    assert "randproj" in result.stdout and "adaptemb-randproj" in result.stdout


def test_installed_plugin_works_through_compress_save_and_load(plugin_env: dict[str, str], tmp_path: Path) -> None:
    script = f"""
import numpy as np, adaptemb
x = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32)
codes = adaptemb.compress(x, method="randproj", k=8)
assert codes.to_dense().shape == (50, 8), codes
model = adaptemb.fit(x, "randproj")
model.save({str(tmp_path / 'rp.safetensors')!r})
again = adaptemb.load({str(tmp_path / 'rp.safetensors')!r})
assert np.array_equal(again.encode(x, k=4).to_dense(), model.encode(x, k=4).to_dense())
info = [i for i in adaptemb.list_compressors() if i.name == "randproj"][0]
print(info.source.package, info.source.version)
"""
    result = _run(["-c", script], plugin_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "adaptemb-randproj 0.1.0"


def test_the_plugin_passes_adaptemb_contract_suite(plugin_env: dict[str, str], tmp_path: Path) -> None:
    result = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "test_randproj.py")], plugin_env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "warning" not in result.stdout.lower(), result.stdout[-3000:]
