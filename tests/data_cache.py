"""Where the tests' real data comes from: the shared data folder, else a checked download.

PTB and Multi30k are read from the shared data folder (``$FAIRSEQ_NOISING_SHARED``, else
``<repo>/../shared/data``) when it holds them. Otherwise :func:`locate` downloads the public
originals once into a cache folder (``$FAIRSEQ_NOISING_DATA_CACHE``, else
``${XDG_CACHE_HOME:-~/.cache}/fairseq-noising/data``), keeping a file only when its SHA-256 is the
one below (the download itself is :mod:`fairseq_noising.data_prep.ptb`'s, which the recipes use
too). ``FAIRSEQ_NOISING_DOWNLOAD=0`` turns downloading off; ``FAIRSEQ_NOISING_PTB_URL`` and
``FAIRSEQ_NOISING_MULTI30K_URL`` replace the originals' addresses (a mirror holding the same files).

The checksums. PTB: the Zaremba et al. LSTM repository's ``data/ptb.*.txt``, the same files as the
shared folder's (its SHA256SUMS), listed in fairseq_noising/data_prep/ptb.py. Multi30k: the
published ``.gz`` files (multi30k/dataset, ``data/task1/raw``), checked as downloaded, then
decompressed. Decompressed they differ from the
shared folder's copies: those end train and val with one extra empty line, and their ``val.de`` is
another version (61 of its 1,014 German captions differ). So no test may depend on which of the
two it reads: loaders drop the extra empty line (``conftest.head_lines``), and expected values are
computed from the text read.
"""

import os
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Tuple

from fairseq_noising.data_prep import ptb

REPO = Path(__file__).resolve().parents[1]


class Dataset(NamedTuple):
    url_env: str  # the environment variable that replaces url
    url: str  # the folder the files are downloaded from
    # file name in the data folder -> (file name at url, SHA-256 of the downloaded bytes);
    # a .gz downloaded for a name without .gz is decompressed
    files: Dict[str, Tuple[str, str]]


MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"


DATASETS = {
    "ptb": Dataset("FAIRSEQ_NOISING_PTB_URL", ptb.URL, ptb.FILES),
    "multi30k": Dataset(
        "FAIRSEQ_NOISING_MULTI30K_URL",
        MULTI30K_URL,
        {
            "train.en": (
                "train.en.gz",
                "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
            ),
            "train.de": (
                "train.de.gz",
                "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
            ),
            "val.en": (
                "val.en.gz",
                "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
            ),
            "val.de": (
                "val.de.gz",
                "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
            ),
            "test.en": (
                "test_2016_flickr.en.gz",
                "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
            ),
            "test.de": (
                "test_2016_flickr.de.gz",
                "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
            ),
        },
    ),
}


class DataUnavailable(Exception):
    """The data is in no folder and could not be downloaded; the message says what to do."""


def shared_data_dir() -> Path:
    return Path(os.environ.get("FAIRSEQ_NOISING_SHARED", REPO.parent / "shared" / "data"))


def cache_dir() -> Path:
    if "FAIRSEQ_NOISING_DATA_CACHE" in os.environ:
        return Path(os.environ["FAIRSEQ_NOISING_DATA_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "fairseq-noising" / "data"


def locate(name: str, announce: Callable[[str], None] = print) -> Path:
    """The folder holding dataset ``name``'s files: the shared one, else the cache, downloading
    what the cache lacks (announced in one line). Raises DataUnavailable when that fails."""
    dataset = DATASETS[name]
    shared, cached = shared_data_dir() / name, cache_dir() / name
    for folder in (shared, cached):
        if all((folder / f).is_file() for f in dataset.files):
            return folder
    url = os.environ.get(dataset.url_env, dataset.url).rstrip("/")
    wanted = ", ".join(dataset.files)
    where = f"real test data {name} is missing: put {wanted} into {shared} or {cached}"
    if os.environ.get("FAIRSEQ_NOISING_DOWNLOAD") == "0":
        raise DataUnavailable(f"{where} (downloading them is off: FAIRSEQ_NOISING_DOWNLOAD=0)")
    announce(f"downloading {name} from {url} to {cached}")
    try:
        download(dataset, url, cached)
    except (OSError, ValueError) as e:
        raise DataUnavailable(f"{where}; downloading them from {url} failed: {e}") from None
    return cached


def download(dataset: Dataset, url: str, folder: Path) -> None:
    """Downloads the files folder lacks from url, each kept only when its checksum is right."""
    ptb.download(folder, url, dataset.files)
