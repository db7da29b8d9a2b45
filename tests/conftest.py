"""Shared fixtures: where the real data lives, and binarized copies of it in temporary folders.

Real data comes from ``$FAIRSEQ_NOISING_SHARED`` or ``<repo>/../shared/data``. Tests that need it
fail (they do not skip) when it is missing, saying where they looked.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_noising"


# console scripts run single-threaded, so that tests running side by side do not oversubscribe
CLI_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# the tiny stock models the CLI tests train: fairseq's lstm_lm and lstm with 16 units
TINY_LM = (
    "--arch lstm_lm --decoder-embed-dim 16 --decoder-hidden-size 16 --decoder-out-embed-dim 16"
).split()
TINY_MT = (
    "--arch lstm --encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 "
    "--decoder-hidden-size 16 --decoder-out-embed-dim 16"
).split()


def shared_data_dir() -> Path:
    return Path(os.environ.get("FAIRSEQ_NOISING_SHARED", REPO.parent / "shared" / "data"))


def require_shared(*parts) -> Path:
    path = shared_data_dir().joinpath(*parts)
    if not path.exists():
        pytest.fail(
            f"real test data {path} is missing: set FAIRSEQ_NOISING_SHARED to the shared data "
            f"folder (looked in {shared_data_dir()})",
            pytrace=False,
        )
    return path


def cli(name: str) -> str:
    """A console script of the running interpreter's environment (fairseq-train, ...)."""
    return str(Path(sys.executable).parent / name)


def run_cli(args, cwd=None, timeout=900, check=True, env=None):
    """Runs a console script; on failure the assertion shows the end of its output."""
    proc = subprocess.run(
        [cli(args[0])] + [str(a) for a in args[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args[:2]))} ... exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def head_lines(src: Path, dst: Path, n=None):
    """Copies the first n lines (all when n is None) of src into dst, minus trailing empty lines.

    (Multi30k's train and val files end with one extra empty line, which must not become an
    empty sentence pair.)"""
    with open(src, encoding="utf-8") as f:
        lines = f.read().rstrip("\n").split("\n")
    dst.write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    return dst


def fairseq_preprocess(*argv) -> Path:
    """Runs fairseq-preprocess's own ``main`` in-process (saves starting Python and fairseq)."""
    import logging

    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(
        [str(a) for a in argv] + ["--workers", "1"]
    )
    log = logging.getLogger(preprocess.__name__)
    handlers = list(log.handlers)
    try:
        preprocess.main(args)
    finally:
        for handler in set(log.handlers) - set(handlers):  # main() adds a preprocess.log handler
            log.removeHandler(handler)
            handler.close()
    return Path(args.destdir)


def binarize_lm(dest: Path, train_lines=None, valid_lines=None, test_lines=None) -> Path:
    """The first lines of PTB's splits (all when None) in dest/raw, binarized into dest/bin."""
    ptb = require_shared("ptb")
    raw = dest / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    head_lines(ptb / "ptb.train.txt", raw / "train.txt", train_lines)
    head_lines(ptb / "ptb.valid.txt", raw / "valid.txt", valid_lines)
    head_lines(ptb / "ptb.test.txt", raw / "test.txt", test_lines or valid_lines)
    return fairseq_preprocess(
        "--only-source",
        "--trainpref",
        raw / "train.txt",
        "--validpref",
        raw / "valid.txt",
        "--testpref",
        raw / "test.txt",
        "--destdir",
        dest / "bin",
    )


def binarize_translation(dest: Path, train_lines=None, valid_lines=None) -> Path:
    m30k = require_shared("multi30k")
    raw = dest / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, src_split, n in (
        ("train", "train", train_lines),
        ("valid", "val", valid_lines),
        ("test", "test", valid_lines),
    ):
        for lang in ("en", "de"):
            head_lines(m30k / f"{src_split}.{lang}", raw / f"{split}.{lang}", n)
    return fairseq_preprocess(
        "--source-lang",
        "en",
        "--target-lang",
        "de",
        "--trainpref",
        raw / "train",
        "--validpref",
        raw / "valid",
        "--testpref",
        raw / "test",
        "--destdir",
        dest / "bin",
    )


# line counts of the tiny PTB: a few seconds of training; valid and test of unequal length
PTB_TINY_LINES = {"train": 300, "valid": 20, "test": 7}


@pytest.fixture(scope="session")
def ptb_tiny_bin(tmp_path_factory) -> Path:
    """The first 300 training lines of PTB, 20 of valid and 7 of test, binarized (the text
    splits are in the folder's sibling ``raw``)."""
    lines = PTB_TINY_LINES
    return binarize_lm(
        tmp_path_factory.mktemp("ptb_tiny"), lines["train"], lines["valid"], lines["test"]
    )


@pytest.fixture(scope="session")
def ptb_bin(tmp_path_factory) -> Path:
    """The whole of PTB, binarized with fairseq-preprocess."""
    return binarize_lm(tmp_path_factory.mktemp("ptb"))


@pytest.fixture(scope="session")
def ptb_small_bin(tmp_path_factory) -> Path:
    """The first 2000 training lines of PTB (and 200 of valid and test), binarized."""
    return binarize_lm(tmp_path_factory.mktemp("ptb_small"), 2000, 200)


@pytest.fixture(scope="session")
def multi30k_small_bin(tmp_path_factory) -> Path:
    """The first 2000 Multi30k En-De training pairs (and 200 of valid and test), binarized."""
    return binarize_translation(tmp_path_factory.mktemp("m30k_small"), 2000, 200)


def build_task(argv):
    """A task set up in-process exactly as ``fairseq-train argv`` would set it up."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[str(a) for a in argv])
    cfg = convert_namespace_to_omegaconf(args)
    return tasks.setup_task(cfg.task), cfg


def lm_task_argv(data, scheme, gamma, *extra):
    return [
        data,
        "--user-dir",
        PLUGIN_DIR,
        "--task",
        "noised_language_modeling",
        "--arch",
        "lstm_lm",
        "--noise-scheme",
        scheme,
        "--noise-gamma",
        gamma,
        "--tokens-per-sample",
        35,
        *extra,
    ]


@pytest.fixture(scope="session")
def ptb_oracle():
    """tests/oracle.py's statistics of the PTB training text, read the authors' way."""
    from oracle import Oracle, read_ptb_words

    return Oracle.from_stream(read_ptb_words(require_shared("ptb", "ptb.train.txt")))


# fairseq's end of sentence is the authors' <eos>
FAIRSEQ_TO_AUTHORS = {"</s>": "<eos>"}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: real data, subprocesses or training runs (the fast tier is pytest -m 'not slow')",
    )
