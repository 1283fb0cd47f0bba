"""Built-in real datasets: the default one shipped in the package, the others built on first use.

Built datasets live in the cache folder (``cache_dir()``): ``$ADAPTEMB_CACHE``, else
``$XDG_CACHE_HOME/adaptemb``, else ``~/.cache/adaptemb``; files are ``datasets/NAME.npz``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from adaptemb.datasets.base import Dataset
from adaptemb.datasets.formats import read_dataset, save_dataset
from adaptemb.errors import did_you_mean

DEFAULT_DATASET_FILE = Path(__file__).parent / "data" / "wordnet-default.npz"


@dataclass(frozen=True)
class BuiltinDataset:
    """One built-in dataset: its name, the builder that makes it, and what it is."""

    name: str
    builder: str  # "default" (shipped), "wordnet" or "fashion-mnist"
    description: str


BUILTIN_DATASETS: dict[str, BuiltinDataset] = {
    item.name: item
    for item in (
        BuiltinDataset(
            "default", "default", "WordNet example -> definition, 8,000 x 384 MiniLM (float16), shipped"
        ),
        BuiltinDataset(
            "wordnet-examples", "wordnet", "WordNet example sentence -> definition, 32,663 x 384 MiniLM"
        ),
        BuiltinDataset(
            "wordnet-lemmas", "wordnet", "WordNet lemma -> definitions of all its senses, 32,663 x 384"
        ),
        BuiltinDataset(
            "fashion-mnist", "fashion-mnist", "Fashion-MNIST train -> test, efficientnet-lite0 1280-d, 1-NN"
        ),
    )
}
BUILDERS = ("wordnet", "fashion-mnist")


def cache_dir() -> Path:
    """The user cache folder of adaptemb (not created here)."""
    if os.environ.get("ADAPTEMB_CACHE"):
        return Path(os.environ["ADAPTEMB_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "adaptemb"
    return Path.home() / ".cache" / "adaptemb"


def builtin_path(name: str) -> Path:
    """Where built-in dataset ``name`` is (the package file for ``default``, else the cache)."""
    item = _get(name)
    return DEFAULT_DATASET_FILE if item.builder == "default" else cache_dir() / "datasets" / f"{name}.npz"


def is_available(name: str) -> bool:
    """True when ``name`` can be loaded without building it first."""
    return builtin_path(name).is_file()


def load_builtin(name: str, *, progress: bool = True) -> Dataset:
    """Load built-in dataset ``name``, building it into the cache first when needed."""
    path = builtin_path(name)
    if not path.is_file():
        if _get(name).builder == "default":
            raise FileNotFoundError(f"the packaged default dataset {path} is missing; reinstall adaptemb")
        build_builtin(_get(name).builder, progress=progress)
    dataset = read_dataset(path)
    dataset.name = name
    return dataset


def build_builtin(
    builder: str,
    *,
    model: str | None = None,
    limit: int | None = None,
    out: str | Path | None = None,
    device: str | None = None,
    image_size: int | None = None,
    weights: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Path]:
    """Build the datasets of ``builder`` ("wordnet" or "fashion-mnist") and save them in ``out``.

    ``out`` is a folder (default: the cache's ``datasets/``); returns ``{name: file}``.
    ``image_size`` and ``weights`` (a local weights file for a ``timm:``/``open_clip:`` model) apply to
    fashion-mnist only.
    """
    if builder not in BUILDERS:
        raise ValueError(
            f"unknown dataset builder {builder!r}{did_you_mean(builder, BUILDERS)}; valid: {', '.join(BUILDERS)}"
        )
    options = {
        key: value for key, value in (("image_size", image_size), ("weights", weights)) if value is not None
    }
    if options and builder != "fashion-mnist":
        raise ValueError(f"{' and '.join(options)} apply to fashion-mnist only, not {builder!r}")
    folder = Path(out).expanduser() if out is not None else cache_dir() / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    datasets = _run_builder(builder, model=model, limit=limit, device=device, progress=progress, **options)
    seconds = f"{time.perf_counter() - start:.1f}"
    written = {}
    for name, dataset in datasets.items():
        dataset.metadata["build_seconds"] = seconds
        written[name] = save_dataset(dataset, folder / f"{name}.npz")
    return written


def _run_builder(builder: str, **options: object) -> dict[str, Dataset]:
    if builder == "wordnet":
        from adaptemb.datasets.wordnet import build_wordnet

        return build_wordnet(**options)  # type: ignore[arg-type]
    from adaptemb.datasets.fashion_mnist import build_fashion_mnist

    return {"fashion-mnist": build_fashion_mnist(**options)}  # type: ignore[arg-type]


def unknown_dataset_message(source: str) -> str:
    """The error text for a source that is neither a path nor a built-in name."""
    names = list(BUILTIN_DATASETS)
    return (
        f"no file or folder {source!r}, and no built-in dataset of that name{did_you_mean(source, names)}; "
        f"built-in datasets: {', '.join(names)}"
    )


def _get(name: str) -> BuiltinDataset:
    if name not in BUILTIN_DATASETS:
        raise ValueError(unknown_dataset_message(name))
    return BUILTIN_DATASETS[name]
