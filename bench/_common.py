"""What the benchmarks share: PTB (found, binarized once by the recipes' own
``recipes/prepare_ptb.py`` into a cache folder, loaded as token ids), one way to start and stop
the processes they time, and the machine line they print.

Not a test module and not part of the plugin. The benchmarks import it as ``_common`` (they put
their own folder on ``sys.path``).
"""

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_noising"

for folder in (REPO, REPO / "recipes"):  # the plugin (installed editable: be robust), the recipes
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import prepare_ptb  # noqa: E402

GRACE = 5.0  # s between SIGTERM and SIGKILL when processes are stopped


# ------------------------------------------------------------------ PTB


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
    try:
        return prepare_ptb.check(ptb_dir)
    except prepare_ptb.Missing as e:
        sys.exit(
            f"error: PTB not found: {e.folder / e.name} missing. Pass --ptb-dir DIR (the folder "
            "with ptb.train.txt, ptb.valid.txt, ptb.test.txt) or set FAIRSEQ_NOISING_SHARED to "
            "the shared data folder."
        )


def binarized_ptb(ptb_dir: Path, cache_dir: Path) -> Path:
    """PTB binarized by ``recipes/prepare_ptb.py`` once under ``cache_dir``, in a folder named by
    a hash of the three text files (changed text is binarized again)."""
    ptb_dir = check_ptb(ptb_dir)
    digest = hashlib.blake2b(digest_size=8)
    for name in prepare_ptb.FILES:
        digest.update((ptb_dir / name).read_bytes())
    out = Path(cache_dir) / f"ptb-bin-{digest.hexdigest()}"
    if not prepare_ptb.is_binarized(out):
        print(f"binarizing PTB into {out} ...", flush=True)
        try:
            prepare_ptb.binarize(ptb_dir, out)
        except OSError:  # another run finished first
            if not prepare_ptb.is_binarized(out):
                raise
    return out


def ptb_train_stream(data_bin: Path):
    """(tokens int64 [N], dictionary, dataset) of binarized PTB train, as the noised LM task sees
    them: the dictionary gets ``<blank>`` added exactly as the task does; the token stream holds
    one ``</s>`` per line (929,589 tokens for PTB)."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_noising.stats_cache import read_token_stream
    from fairseq_noising.tasks.noising_config import add_blank

    dictionary = Dictionary.load(str(data_bin / "dict.txt"))
    add_blank(dictionary)
    dataset = data_utils.load_indexed_dataset(str(data_bin / "train"), dictionary, "mmap")
    tokens, _ = read_token_stream(dataset)
    return tokens, dictionary, dataset


# ------------------------------------------------------------------ processes


def cli(name: str) -> str:
    """A console script of the running interpreter's environment (fairseq-train, ...)."""
    return str(Path(sys.executable).parent / name)


def start(cmd, env=None, cwd=REPO, stdout=subprocess.PIPE) -> subprocess.Popen:
    """Starts ``cmd`` in a process group of its own (what it starts in turn goes with it), its
    stderr into its stdout (a pipe of text lines unless ``stdout`` says otherwise)."""
    return subprocess.Popen(
        [str(a) for a in cmd],
        cwd=cwd,
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(procs) -> None:
    """SIGTERM to the process group of each of ``procs``, SIGKILL to what is left of them GRACE
    seconds later; waits for each."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:  # the whole group is gone
                pass
        deadline = time.monotonic() + GRACE
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


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
