"""The shared contract, run over every registered compressor (built-in or installed)."""

from pathlib import Path

import pytest

import adaptemb
from adaptemb.testing import CompressorContract, assert_same_codes, clustered_embeddings
from adaptemb.testing.contract import codes_from_fresh_process

SLOW_CONTRACTS = {"csr", "csr_symmetric", "csr_byte_heads"}
"""Contracts whose fits take long (csr trains; its tests refit it): 33-70 s a class measured (-n 2, under load), the
others at most 11 s; marked slow, so the full suite runs them and the fast loop (``-m "not slow"``) does not."""


def _add_contract(suffix: str, method: str, **attributes: object) -> None:
    """The contract suite as the test class ``TestContract_{suffix}`` on ``method``, with ``attributes``."""
    name = f"TestContract_{suffix}"
    marks = {"pytestmark": [pytest.mark.slow]} if suffix in SLOW_CONTRACTS else {}
    # every class's fit is loaded in one fresh process below, not in one process per class (each start imports torch)
    attributes = {"fresh_process": False, **attributes}
    globals()[name] = type(name, (CompressorContract,), {"method": method, **marks, **attributes})


for _info in adaptemb.list_compressors():
    # a built-in method is always searched through its own index, never by brute force
    _add_contract(_info.name, _info.name, allow_brute_force=_info.source.package != "adaptemb")

# every declared projection followed by every declared quantiser (third-party parts join by declaring their role)
_registry = adaptemb.get_registry()
for _composed in _registry.compositions():
    _builtin = all(_registry.info(part).source.package == "adaptemb" for part in _composed.split("+"))
    _add_contract(_composed.replace("+", "_then_"), _composed, allow_brute_force=not _builtin)

# built-in configurations that are another fitted state or search path than the defaults: (method, params, why)
_VARIANTS: dict[str, tuple[str, dict[str, object], str]] = {
    "mrl_linear_adapter": (
        "mrl", {"adapter": "linear"}, "mrl with its learned adapter is a different fitted state"),
    "csr_symmetric": (
        "csr", {"scoring": "symmetric"}, "csr scored sparse·sparse (the paper's protocol): its own index path"),
    "csr_byte_heads": (
        "csr", {"k": 12, "byte_budgets": [3, 5], "head_epochs": 1},
        "csr with heads fitted for byte budgets: k picks a head (its queries projected by it), bytes the best one"),
    "bsa_cosine": (
        "bsa", {"scoring": "cosine"}, "bsa scored by cosine between binary codes: posting lists with cosine weights"),
    "mrl_linear_adapter_then_binary": (
        "mrl+binary", {"projection": {"adapter": "linear", "epochs": 1, "progress": False}},
        "the mrl adapter as a composition's projection, before sign bits"),
    "svd_then_rabitq_unrotated": (
        "svd+rabitq", {"rotation": "none"}, "a composition without the rotation (the others fit with the random one)"),
    "svd_then_binary_hadamard": (
        "svd+binary", {"rotation": "hadamard"},
        "sign bits behind the randomized Hadamard transform (stored as signs; auto's choice above rank 1024)"),
    "svd_then_binary_two_bit": (
        "svd+binary", {"bits_per_dim": 2},
        "2 bits per rotated dimension as two sign planes: a code of width w holds rank w / 2, with lifted queries"),
}
for _suffix, (_method, _params, _why) in _VARIANTS.items():
    _add_contract(_suffix, _method, params=_params, allow_brute_force=False, __doc__=_why)


def _contract_classes() -> dict[str, type[CompressorContract]]:
    return {name: cls for name, cls in globals().items() if name.startswith("TestContract_")}


@pytest.mark.slow  # one new Python process (imports torch and adaptemb) and a fit of every class
def test_every_contract_fit_loads_in_one_fresh_process(tmp_path: Path) -> None:
    """Each contract class's fit (its method and params on the contract data), saved, loads in a new Python process
    and encodes the data to the same codes: ``CompressorContract.test_save_load_in_fresh_process`` for all the
    classes above at the cost of one process start."""
    x, _ = clustered_embeddings()
    want, models = {}, []
    for name, cls in _contract_classes().items():
        fitted = adaptemb.get_compressor(cls.method, **cls.fit_params()).fit(x)
        models.append(fitted.save(tmp_path / f"{name}.safetensors"))
        want[name] = fitted.encode(x)
    assert len(want) >= len(adaptemb.list_compressors())  # every registered method, its compositions and variants
    for codes, loaded in zip(want.values(), codes_from_fresh_process(models, x, tmp_path)):
        assert_same_codes(codes, loaded)
