"""The shared contract, run over every registered compressor (built-in or installed)."""

from typing import ClassVar

import adaptemb
from adaptemb.testing import CompressorContract

for _info in adaptemb.list_compressors():
    _name = f"TestContract_{_info.name}"
    # a built-in method is always searched through its own index, never by brute force
    _builtin = _info.source.package == "adaptemb"
    globals()[_name] = type(_name, (CompressorContract,), {"method": _info.name, "allow_brute_force": not _builtin})

# every declared projection followed by every declared quantiser (third-party parts join by declaring their role)
_registry = adaptemb.get_registry()
for _composed in _registry.compositions():
    _name = f"TestContract_{_composed.replace('+', '_then_')}"
    _builtin = all(_registry.info(part).source.package == "adaptemb" for part in _composed.split("+"))
    globals()[_name] = type(_name, (CompressorContract,), {"method": _composed, "allow_brute_force": not _builtin})


class TestContract_mrl_linear_adapter(CompressorContract):
    """``mrl`` with its learned adapter is a different fitted state: run the contract on it too."""

    method = "mrl"
    params: ClassVar[dict[str, object]] = {"adapter": "linear"}
    allow_brute_force = False


class TestContract_csr_symmetric(CompressorContract):
    """``csr`` scored sparse·sparse (the paper's protocol): its own index path (posting lists)."""

    method = "csr"
    params: ClassVar[dict[str, object]] = {"scoring": "symmetric"}
    allow_brute_force = False


class TestContract_bsa_cosine(CompressorContract):
    """``bsa`` scored by cosine between binary codes: the posting lists with cosine weights."""

    method = "bsa"
    params: ClassVar[dict[str, object]] = {"scoring": "cosine"}
    allow_brute_force = False


class TestContract_mrl_linear_adapter_then_binary(CompressorContract):
    """The mrl adapter as a composition's projection, before sign bits."""

    method = "mrl+binary"
    params: ClassVar[dict[str, object]] = {"projection": {"adapter": "linear", "epochs": 1, "progress": False}}
    allow_brute_force = False


class TestContract_svd_then_rabitq_unrotated(CompressorContract):
    """A composition without the rotation (the composed contract classes fit with the random one)."""

    method = "svd+rabitq"
    params: ClassVar[dict[str, object]] = {"rotation": "none"}
    allow_brute_force = False
