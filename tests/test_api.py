"""The one-call API: compress, fit, load, get_compressor, list_compressors."""

from pathlib import Path

import numpy as np
import pytest
import torch

import adaptemb


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((80, 16)).astype(np.float32)


def test_compress_fits_and_encodes_at_the_budget(x: np.ndarray) -> None:
    codes = adaptemb.compress(x, method="svd", k=4)
    assert isinstance(codes, adaptemb.DenseCodes) and codes.to_dense().shape == (80, 4)
    torch_codes = adaptemb.compress(torch.from_numpy(x), method="svd", k=4)
    np.testing.assert_array_equal(codes.to_dense(), torch_codes.to_dense())


def test_the_issue_tour_runs_end_to_end(x: np.ndarray, tmp_path: Path) -> None:
    queries = x[:5]
    comp = adaptemb.fit(x, method="int8")
    qc, dc = comp.encode(queries), comp.encode(x)
    scores = qc.similarity(dc)
    assert scores.shape == (5, 80)
    np.testing.assert_allclose(scores, qc.to_dense() @ dc.to_dense().T, rtol=1e-5)
    comp.save(tmp_path / "m.safetensors")
    comp2 = adaptemb.load(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(comp2.encode(queries).codes, qc.codes)


def test_fit_passes_k_only_to_methods_with_a_budget(x: np.ndarray) -> None:
    assert adaptemb.fit(x, "mrl", k=6).budgets().default == 6
    with pytest.raises(ValueError, match=f"int8 has no budget: it always keeps all {x.shape[1]} dims"):
        adaptemb.fit(x, "int8", k=6)
    d = x.shape[1]  # k = d is what a method without a budget always keeps: accepted by fit as by encode
    assert adaptemb.compress(x, "int8", k=d).codes.shape == x.shape


def test_unknown_or_invalid_parameters_list_the_valid_ones(x: np.ndarray) -> None:
    with pytest.raises(adaptemb.InvalidConfigError, match="unknown parameter 'treshold' \\(did you mean 'threshold'\\?\\)"):
        adaptemb.fit(x, "binary", treshold="mean")
    with pytest.raises(adaptemb.InvalidConfigError, match="Valid parameters \\(defaults\\): seed=0, threshold='mean', rescore=0"):
        adaptemb.fit(x, "binary", treshold="mean")
    with pytest.raises(adaptemb.InvalidConfigError, match="threshold: Input should be 'mean' or 'zero'"):
        adaptemb.fit(x, "binary", threshold="median")
    with pytest.raises(adaptemb.InvalidConfigError, match="k: Input should be greater than or equal to 1"):
        adaptemb.fit(x, "svd", k=0)


def test_supervision_is_refused_by_methods_that_do_not_learn_from_it(x: np.ndarray) -> None:
    with pytest.raises(adaptemb.InvalidConfigError, match="svd does not learn from labels; it accepts only the embeddings"):
        adaptemb.fit(x, "svd", labels=np.zeros(80, dtype=np.int64))
    with pytest.raises(adaptemb.InvalidConfigError, match="does not learn from pairs"):
        adaptemb.compress(x, method="mrl", pairs=(x, x))


def test_configs_are_frozen_and_compressors_describe_themselves(x: np.ndarray) -> None:
    comp = adaptemb.get_compressor("svd", k=3)
    with pytest.raises(Exception, match="frozen"):
        comp.config.k = 5  # type: ignore[misc]
    assert "unfitted" in repr(comp) and "dim=16" in repr(comp.fit(x))
    assert set(type(comp).parameters()) == {"seed", "k", "values"}


def test_search_returns_best_first_ids_and_scores(x: np.ndarray) -> None:
    comp = adaptemb.fit(x, "mrl")
    scores, ids = comp.search(x[:3], comp.encode(x), top_k=4)
    np.testing.assert_array_equal(ids[:, 0], [0, 1, 2])  # each normalised vector is its own best match
    assert np.all(np.diff(scores, axis=1) <= 0)
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        comp.search(x[:3], comp.encode(x), top_k=0)


@pytest.mark.filterwarnings("error")
def test_read_only_arrays_are_read_without_a_warning() -> None:
    """A memory-mapped or otherwise read-only array (np.load(mmap_mode="r"), arrow buffers) encodes as a writable
    copy would, and torch's "not writable" warning does not reach the user."""
    x = np.random.default_rng(0).standard_normal((200, 16)).astype(np.float32)
    frozen = x.copy()
    frozen.setflags(write=False)
    compressor = adaptemb.fit(frozen, "svd", k=4)
    np.testing.assert_array_equal(compressor.encode(frozen).to_dense(), adaptemb.fit(x, "svd", k=4).encode(x).to_dense())
    assert not frozen.flags.writeable and np.array_equal(frozen, x)


def test_compress_reads_and_validates_its_embeddings_once(x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """compress fits and encodes the rows it read once: one float validation (``as_matrix``) and one integer read
    (``InputSpec.read``) of the embeddings, where fit then encode reads them twice; the codes are fit-then-encode's."""
    import adaptemb.compressor
    import adaptemb.fitting
    import adaptemb.inputs

    validated, read = [], []
    for module in (adaptemb.inputs, adaptemb.compressor, adaptemb.fitting):
        real_matrix = module.as_matrix
        monkeypatch.setattr(module, "as_matrix", lambda rows, *args, _real=real_matrix, **kwargs: (
            validated.append(kwargs.get("name", "embeddings")), _real(rows, *args, **kwargs))[1])
    real_read = adaptemb.inputs.InputSpec.read
    monkeypatch.setattr(adaptemb.inputs.InputSpec, "read", lambda self, rows, **kwargs: (
        read.append(kwargs.get("name", "embeddings")), real_read(self, rows, **kwargs))[1])
    codes = adaptemb.compress(x, "svd", k=4)
    assert validated == ["embeddings"] and read == ["embeddings"]
    integers = np.clip(np.round(x * 40), -127, 127).astype(np.int8)
    validated.clear(), read.clear()
    int8_codes = adaptemb.compress(integers, "svd", k=4, input_kind="int8", input_scale=0.025)
    assert validated == ["embeddings"] and read == ["embeddings"]
    monkeypatch.undo()
    np.testing.assert_array_equal(codes.to_dense(), adaptemb.fit(x, "svd").encode(x, k=4).to_dense())
    again = adaptemb.fit(integers, "svd", input_kind="int8", input_scale=0.025).encode(
        integers, k=4, input_kind="int8", input_scale=0.025)
    np.testing.assert_array_equal(int8_codes.to_dense(), again.to_dense())
