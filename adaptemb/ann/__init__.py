"""Approximate search over compressed codes: coarse cells, each code stored in its cell, the probed cells scanned
with the kind's own scorer, and a recall knob calibrated at build.

``Compressor.index(codes, ann="auto")`` (or ``ann=AnnConfig(...)``) returns an ``AnnIndex``: ``search(q, k)``
answers as the exact index does, with ``nprobe=``, ``recall=`` and ``filter=``; ``tune(queries)`` recalibrates;
``add`` / ``remove`` / ``compact`` change the rows; ``save`` writes one file that ``adaptemb.load_index`` opens
memory-mapped. A code kind gets approximate search through its ``CellScorer`` (``adaptemb.ann.scorers``).

This package sits above ``adaptemb.codes`` and ``adaptemb.index``; nothing below imports it except the one hook
in ``Compressor.index`` (``adaptemb.index.bound``) and the index loader (``adaptemb.api``).
"""

from adaptemb.ann.build import build_ann
from adaptemb.ann.calibration import Calibration
from adaptemb.ann.config import AnnConfig
from adaptemb.ann.files import is_ann_file
from adaptemb.ann.index import AnnIndex
from adaptemb.ann.plan import ProbePlan
from adaptemb.ann.scorers import CellScorer
from adaptemb.ann.storage import load_ann

__all__ = ["AnnConfig", "AnnIndex", "Calibration", "CellScorer", "ProbePlan", "build_ann", "is_ann_file", "load_ann"]
