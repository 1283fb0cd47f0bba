"""What a compression method declares it can do: class attributes read by the core, the index, the bench and
composition, never probed from what a method overrides. ``CompressorCore`` inherits them; a method overrides
the ones that differ (a property where its config decides)."""

from __future__ import annotations

from typing import ClassVar, Literal


class Capabilities:
    """The declared capabilities of a compressor and their defaults (see each attribute)."""

    fit_inputs: ClassVar[frozenset[str]] = frozenset()
    """Extra supervision ``fit`` accepts: a subset of ``{"pairs", "labels"}``."""
    accepts_input_kinds: ClassVar[tuple[str, ...]] = ()
    """Integer input kinds (``"int8"``, ``"ubinary"``) this method keeps as its codes, without re-quantising:
    ``fit`` then calls ``_fit_passthrough`` and ``encode`` ``_encode_passthrough`` with the validated
    ``IntegerEmbeddings``. Every other method gets such input dequantised to float32 (see ``adaptemb.inputs``)."""
    symmetric: ClassVar[bool] = True
    """True when queries are encoded like documents (``encode_queries`` is ``encode``) and scored by the codes'
    own similarity, so the codes' own index backend serves them. A method that encodes queries its own way
    (``_encode_queries``) or scores otherwise (``score``) declares False, and the ``query_kind`` it emits."""
    normalizes_rows: ClassVar[bool] = False
    """True for methods that encode each row's direction (rows L2-normalised first, ``adaptemb.unit_rows``):
    ``fit`` leaves all-zero rows out (see ``adaptemb.fitting``), and ``encode`` (and ``encoder(k)``) must give a
    zero row the empty code of its kind (``adaptemb.has_direction`` masks it), so a zero query scores 0."""
    trains_on_stream: ClassVar[bool] = False
    """True when a fit from a stream trains on every row (the method's ``_fit_stream`` reads minibatches);
    False when it fits on a uniform sample of ``stream_sample_rows`` rows (the default ``_fit_stream``)."""
    natural_budget: ClassVar[bool] = False
    """True when ``encode(x)`` with ``k=None`` encodes in the method's natural mode, ``_encode_natural(x)``:
    each row keeps its own number of active dims (at most ``budgets().default``); ``k=j`` still encodes at j."""
    affine_values: ClassVar[bool] = False
    """True for a projection whose float values are an affine map of the row, ``A x + b`` (svd: ``b`` centres the
    rows): a composition then scores the float query of its multi-bit stages as ``A q`` (``adaptemb.compose.choice``)."""
    decodes: ClassVar[bool] = False
    """True when ``decode`` reconstructs embeddings from codes (the method implements ``_decode``)."""
    role: ClassVar[Literal["projection", "quantizer"] | None] = None
    """What a method can be in a composed code ``"a+b"`` (``adaptemb.compose``): a ``"projection"`` (float values
    at a rank ``k``: the first part) or a ``"quantizer"`` (codes of the projected values: the second part)."""
    sign_bits: ClassVar[bool] = False
    """True for a quantiser whose codes are one sign bit per dimension: a composition rotates before it by default."""
    bench_partner: ClassVar[Literal["always", "supervised", "matryoshka"] | None] = None
    """When ``adaptemb bench``'s default method list composes this part (a ``role``) with the other role's partners:
    ``"always"``; ``"supervised"``: when the dataset brings pairs or labels this method learns from (``fit_inputs``);
    ``"matryoshka"``: when the embeddings are Matryoshka-trained (``adaptemb bench --matryoshka``); None: never."""
    stream_sample_rows: ClassVar[int] = 100_000
    """Rows of a uniform sample a fit from a stream draws: what ``_fit_stream`` fits on by default, and what a
    method that trains on every row of the stream takes its initialisation statistics from."""
