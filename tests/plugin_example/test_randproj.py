"""The plugin's own tests: adaptemb's contract suite, run on randproj."""

from adaptemb.testing import CompressorContract


class TestRandProj(CompressorContract):
    method = "randproj"
