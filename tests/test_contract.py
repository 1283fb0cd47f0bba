"""The shared contract, run over every registered compressor (built-in or installed)."""

from typing import ClassVar

import adaptemb
from adaptemb.testing import CompressorContract

for _info in adaptemb.list_compressors():
    _name = f"TestContract_{_info.name}"
    globals()[_name] = type(_name, (CompressorContract,), {"method": _info.name})


class TestContract_mrl_linear_adapter(CompressorContract):
    """``mrl`` with its learned adapter is a different fitted state: run the contract on it too."""

    method = "mrl"
    params: ClassVar[dict[str, object]] = {"adapter": "linear"}
