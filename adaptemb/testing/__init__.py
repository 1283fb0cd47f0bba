"""The contract every compressor must honour, as a pytest class plugin authors reuse.

Subclass :class:`CompressorContract` in your test module and name your method::

    from adaptemb.testing import CompressorContract

    class TestMyMethod(CompressorContract):
        method = "mymethod"          # registered name
        params = {"h": 64}           # optional, merged over the class's ``test_params``

pytest then checks shapes and budgets, seed determinism, save -> load (in this process and in a
fresh one) giving identical codes, exact storage accounting, the codes file round trip, the method's
index returning the top-10 of its own ``score`` (and saving and loading), ONNX export reproducing
``encode`` under onnxruntime (for methods that export), that bad inputs are rejected with clear
errors, and that all-zero rows are data: a method that encodes directions (``normalizes_rows``) fits
on the other rows (counted, one ``ZeroRowsWarning``) and gives a zero row the empty code, in memory, in
streaming encode and in its ONNX graph; every method encodes zero rows and searches zero queries to
finite scores. The fixtures (``contract_data``, ``contract_params``, ``contract_fitted``) and the ``slow`` and
``gpu`` markers come from adaptemb's pytest plugin (``adaptemb.pytest_plugin``), which pytest loads by
itself wherever adaptemb is installed.
"""

from adaptemb.testing.asserts import (
    MIN_FLIPS_ALLOWED,
    assert_close_codes,
    assert_finite_codes,
    assert_same_codes,
    assert_top_k_matches,
    budgets_to_check,
    code_arrays,
)
from adaptemb.testing.contract import CompressorContract
from adaptemb.testing.data import Data, clustered_embeddings, with_zero_rows

__all__ = [
    "MIN_FLIPS_ALLOWED",
    "CompressorContract",
    "Data",
    "assert_close_codes",
    "assert_finite_codes",
    "assert_same_codes",
    "assert_top_k_matches",
    "budgets_to_check",
    "clustered_embeddings",
    "code_arrays",
    "with_zero_rows",
]
