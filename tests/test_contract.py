"""The shared contract, run over every registered compressor (built-in or installed)."""

from typing import ClassVar

import adaptemb
from adaptemb.testing import CompressorContract

for _info in adaptemb.list_compressors():
    _name = f"TestContract_{_info.name}"
    # a built-in method is always searched through its own index, never by brute force
    _builtin = _info.source.package == "adaptemb"
    globals()[_name] = type(_name, (CompressorContract,), {"method": _info.name, "allow_brute_force": not _builtin})


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
