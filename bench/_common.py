"""Helpers shared by the benchmarks: finding PTB, binarizing it once, loading it as token ids.

Not a test module and not part of the plugin. The benchmarks import it as ``_common`` (they put
their own folder on ``sys.path``).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_noising"
PTB_FILES = ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")

if str(REPO) not in sys.path:  # the plugin is installed editable, but be robust
    sys.path.insert(0, str(REPO))


def default_ptb_dir() -> Path:
    shared = os.environ.get("FAIRSEQ_NOISING_SHARED")
    if shared:
        return Path(shared) / "ptb"
    return REPO.parent / "shared" / "data" / "ptb"


def add_ptb_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ptb-dir",
        type=Path,
        default=default_ptb_dir(),
        help="folder holding ptb.{train,valid,test}.txt (default: $FAIRSEQ_NOISING_SHARED/ptb, "
        "else <repo>/../shared/data/ptb; now %(default)s)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "fairseq-noising-bench",
        help="where the binarized PTB is kept between runs (default: %(default)s)",
    )


def check_ptb(ptb_dir: Path) -> Path:
    """The PTB folder, or exit with a one-line message naming what is missing."""
    ptb_dir = Path(ptb_dir)
    missing = [name for name in PTB_FILES if not (ptb_dir / name).is_file()]
    if missing:
        sys.exit(
            f"error: PTB not found: {', '.join(str(ptb_dir / m) for m in missing)} missing. "
            "Pass --ptb-dir DIR (the folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt) or "
            "set FAIRSEQ_NOISING_SHARED to the shared data folder."
        )
    return ptb_dir


def cli(name: str) -> str:
    """A console script of the running interpreter's environment (fairseq-preprocess, ...)."""
    return str(Path(sys.executable).parent / name)


def _fingerprint(ptb_dir: Path) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for name in PTB_FILES:
        digest.update((ptb_dir / name).read_bytes())
    return digest.hexdigest()


def binarized_ptb(ptb_dir: Path, cache_dir: Path) -> Path:
    """fairseq-preprocess output for PTB (``--only-source``), built once under ``cache_dir``.

    The folder name carries a hash of the three text files, so changed input is rebinarized.
    """
    ptb_dir = check_ptb(ptb_dir)
    out = Path(cache_dir) / f"ptb-bin-{_fingerprint(ptb_dir)}"
    if (
        (out / "dict.txt").is_file()
        and (out / "train.bin").is_file()
        and (out / "valid.bin").is_file()
    ):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ptb-bin-", dir=out.parent))
    cmd = [
        cli("fairseq-preprocess"),
        "--only-source",
        "--trainpref",
        str(ptb_dir / "ptb.train.txt"),
        "--validpref",
        str(ptb_dir / "ptb.valid.txt"),
        "--testpref",
        str(ptb_dir / "ptb.test.txt"),
        "--destdir",
        str(tmp),
        "--workers",
        "2",
    ]
    print(f"binarizing PTB into {out} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(f"error: fairseq-preprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if out.exists():  # another run finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, out)
    return out


def ptb_train_stream(data_bin: Path):
    """(tokens int64 [N], dictionary) of binarized PTB train, as the noised LM task sees them.

    The dictionary gets ``<blank>`` added exactly as the task does; the token stream holds one
    ``</s>`` per line (929,589 tokens for PTB).
    """
    from fairseq.data import Dictionary, data_utils

    from fairseq_noising.stats_cache import read_token_stream
    from fairseq_noising.tasks.noising_config import add_blank

    dictionary = Dictionary.load(str(data_bin / "dict.txt"))
    add_blank(dictionary)
    dataset = data_utils.load_indexed_dataset(str(data_bin / "train"), dictionary, "mmap")
    tokens, _ = read_token_stream(dataset)
    return tokens, dictionary, dataset


def machine_line() -> str:
    load = "n/a"
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass
    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cpus={os.cpu_count()}  loadavg={load}  "
        f"python={sys.version.split()[0]}"
    )
