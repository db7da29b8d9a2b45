"""Shared fixtures: where the real data lives (read by slow tests only: ``require_shared``),
binarized slices of it in temporary folders (``PTB_SLICES``, by the recipes' own
fairseq_noising.data_prep.ptb), the command lines the tests run fairseq with (``COMMON``,
``lm_train_argv``, ``mt_train_argv``, ``stateful_lm_argv``), and helpers that several test
modules share: the plugin's uniforms the oracle draws with (``uniforms_of``), the one-line error
check (``one_line``) and ``processes_naming``.

Real data comes from ``$FAIRSEQ_NOISING_SHARED`` or ``<repo>/../shared/data``, else it is
downloaded once into a cache folder (``tests/data_cache.py``). When it can be had from nowhere, the
first test that needs it stops the run with one line saying what is needed and where to put it.
"""

import os
import subprocess
import sys
from pathlib import Path

# one thread a process, in pytest and in what it starts: xdist's workers and the trainings they
# start share the cores, and so does whatever else runs on the machine (torch's default, a thread
# per core in every process, oversubscribes them: a training with data-loading workers took 7
# times as long, and an in-process bf16 training in a plain `pytest` beside two training rows 20
# times, its threads spinning while they waited for each other)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import data_cache  # noqa: E402
import pytest  # noqa: E402

from fairseq_noising.data_prep import ptb as prepare_ptb  # noqa: E402
from fairseq_noising.data_prep.subwords import spm_dir, train_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_noising"


# console scripts run single-threaded, so that tests running side by side do not oversubscribe
CLI_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# put on the PYTHONPATH of the commands a bf16 test runs (the bf16_cpu fixture)
BF16_CPU = Path(__file__).resolve().parent / "bf16_cpu"


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU that trains in bf16, in the test's process and in the commands it runs with the
    environment this returns. One with bf16 units as it is; on one without, ``--precision bf16``'s
    check is told its flags have AVX512-BF16 and oneDNN is off, PyTorch's own kernels emulating
    (``tests/bf16_cpu/``): the plugin's bf16 behaviour is tested on any CPU. The check itself is
    tested against /proc/cpuinfo, its refusal with the flags mocked."""
    import importlib.util

    import torch

    from fairseq_noising.tasks import precision

    if precision.bf16_supported("cpu"):
        return CLI_ENV
    spec = importlib.util.spec_from_file_location("bf16_cpu", BF16_CPU / "sitecustomize.py")
    emulation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulation)
    for target, name, value in emulation.patches(torch):
        monkeypatch.setattr(target, name, value)
    path = [str(BF16_CPU), *filter(None, [CLI_ENV.get("PYTHONPATH")])]
    return {**CLI_ENV, "PYTHONPATH": os.pathsep.join(path)}


# the flags of every console-script command the tests run (fairseq-train, fairseq-eval-lm, ...):
# the plugin, the CPU, no data-loading workers, one plain line per log record
COMMON = ["--user-dir", PLUGIN_DIR, "--cpu", "--num-workers", 0, "--log-format", "simple"]

# the tiny models the CLI tests train: fairseq's lstm_lm and lstm with 16 units, and the plugin's
# Zaremba language model (noising_lstm_lm_small) with 16 units
TINY_LM = (
    "--arch lstm_lm --decoder-embed-dim 16 --decoder-hidden-size 16 --decoder-out-embed-dim 16"
).split()
TINY_MT = (
    "--arch lstm --encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 "
    "--decoder-hidden-size 16 --decoder-out-embed-dim 16"
).split()
TINY_NOISING_LM = ["--arch", "noising_lstm_lm_small", "--hidden-size", 16]
TOKENS_PER_SAMPLE = 35  # the language models' blocks (the paper's BPTT length)


_config = None  # the running session's, so that a download can be announced past the capture


def pytest_sessionstart(session):
    global _config
    _config = session.config


def _announce(line: str) -> None:
    capture = _config.pluginmanager.get_plugin("capturemanager") if _config else None
    terminal = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    if capture is None or terminal is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        terminal.write_line(line)


_running = None  # the test item running now (its setup, call and teardown)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _running
    _running = item
    try:
        yield
    finally:
        _running = None


def require_shared(name, *parts) -> Path:
    """The real data file or folder ``name/parts`` (name: ``ptb`` or ``multi30k``), from the
    shared data folder, else from the download cache (downloading it there first). Only a test
    marked slow, or a fixture that such a test asked for, may call it: the fast tier needs no
    data files, and this fails any other caller (a test module importing data, too)."""
    if _running is None or _running.get_closest_marker("slow") is None:
        where = "a module being collected" if _running is None else _running.nodeid
        pytest.fail(
            f"{where} reads the real data ({name}) but is not marked slow: the fast tier "
            "(-m 'not slow') needs no data files",
            pytrace=False,
        )
    return shared_or_exit(name).joinpath(*parts)


def shared_or_exit(name) -> Path:
    """data_cache.locate(name), announcing a download past pytest's capture; where the data can
    be had from nowhere, the end of the test run with the one line that says what is needed."""
    try:
        return data_cache.locate(name, _announce)
    except data_cache.DataUnavailable as e:
        pytest.exit(
            f"{e} (pytest -m 'not slow' runs the tests that need none)",
            returncode=pytest.ExitCode.TESTS_FAILED,
        )


def cli(name: str) -> str:
    """A console script of the running interpreter's environment (fairseq-train, ...)."""
    return str(Path(sys.executable).parent / name)


def checkpoint_state(path):
    """A checkpoint fairseq-train wrote, loaded as the plugin loads them (its allow-list: torch
    >= 2.6 loads with weights_only=True), whichever tests ran before in this process."""
    import torch

    from fairseq_noising.checkpoint_safety import allow_fairseq_checkpoints

    allow_fairseq_checkpoints()
    return torch.load(path, map_location="cpu")


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


# fairseq-preprocess's own main in this process (saves starting Python and fairseq)
fairseq_preprocess = prepare_ptb.preprocess


def binarize_lm(dest: Path, train_lines=None, valid_lines=None, test_lines=None) -> Path:
    """The first lines of PTB's splits (all when None) in dest/raw (``ptb.{split}.txt``),
    binarized into dest/bin, as the recipes binarize PTB."""
    lines = {"train": train_lines, "valid": valid_lines, "test": test_lines or valid_lines}
    raw = prepare_ptb.head(require_shared("ptb"), dest / "raw", lines)
    return prepare_ptb.binarize(raw, dest / "bin")


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


def binarize_translation_spm(dest: Path, train_lines, valid_lines, vocab_size) -> Path:
    """The first Multi30k pairs segmented as the recipes' SPM=1 does: a unigram sentencepiece
    model per language (``prepare_translation.py spm-dir``), binarized with each model's
    pieces as the dictionary, the models beside the data (``spm.en.model``, ``spm.de.model``);
    ``dest/bpe.en.model`` is a BPE model of the same English text."""
    import shutil

    binarize_translation(dest / "words", train_lines, valid_lines)  # the raw slices, in words/raw
    raw, spm = dest / "words" / "raw", dest / "spm"
    spm_dir(str(raw), str(spm), "en", "de", vocab_size, False)
    train_model([str(raw / "train.en")], str(dest / "bpe.en"), vocab_size, "bpe")
    flags = ["--source-lang", "en", "--target-lang", "de", "--srcdict", spm / "dict.en.txt"]
    flags += ["--tgtdict", spm / "dict.de.txt", "--trainpref", spm / "train"]
    flags += ["--validpref", spm / "valid", "--testpref", spm / "test", "--destdir", dest / "bin"]
    bin_dir = fairseq_preprocess(*flags)
    for lang in ("en", "de"):
        shutil.copy(spm / f"spm.{lang}.model", bin_dir / f"spm.{lang}.model")
    return bin_dir


# The PTB slices of the tests, each binarized once per session (ptb_tiny_bin, ptb_small_bin,
# ptb_bin): the first lines of train, valid and test, None for all of them. Tests that count
# tokens or lines of a slice read its numbers here.
PTB_SLICES = {
    "tiny": {"train": 300, "valid": 20, "test": 7},  # seconds of training; valid, test unequal
    "small": {"train": 2000, "valid": 200, "test": 200},
    "whole": {"train": None, "valid": None, "test": None},
}


def binarize_ptb_slice(tmp_path_factory, name) -> Path:
    lines = PTB_SLICES[name]
    return binarize_lm(
        tmp_path_factory.mktemp(f"ptb_{name}"), lines["train"], lines["valid"], lines["test"]
    )


@pytest.fixture(scope="session")
def ptb_tiny_bin(tmp_path_factory) -> Path:
    """The first 300 training lines of PTB, 20 of valid and 7 of test, binarized (the text
    splits, ``ptb.{split}.txt``, are in the folder's sibling ``raw``, as for every slice)."""
    return binarize_ptb_slice(tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def ptb_small_bin(tmp_path_factory) -> Path:
    """The first 2000 training lines of PTB (and 200 of valid and test), binarized."""
    return binarize_ptb_slice(tmp_path_factory, "small")


@pytest.fixture(scope="session")
def ptb_bin(tmp_path_factory) -> Path:
    """The whole of PTB, binarized."""
    return binarize_ptb_slice(tmp_path_factory, "whole")


@pytest.fixture(scope="session")
def multi30k_small_bin(tmp_path_factory) -> Path:
    """The first 2000 Multi30k En-De training pairs (and 200 of valid and test), binarized."""
    return binarize_translation(tmp_path_factory.mktemp("m30k_small"), 2000, 200)


@pytest.fixture(scope="session")
def multi30k_spm_bin(tmp_path_factory) -> Path:
    """The first 400 Multi30k pairs (and 50 of valid and test) on 500-piece unigram models,
    binarized as SPM=1 binarizes them (raw text in the folder's sibling words/raw, the word-level
    binarization in words/bin, a BPE model at ../bpe.en.model)."""
    return binarize_translation_spm(tmp_path_factory.mktemp("m30k_spm"), 400, 50, 500)


def build_task(argv):
    """A task set up in-process exactly as ``fairseq-train argv`` would set it up."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    # fairseq-train imports --user-dir, which registers the plugin; in this process the package
    # may have been imported before fairseq was (then fairseq skips it and nothing registers), so
    # the sub-packages that the command line may name register here: --task, --arch, --lr-scheduler
    import fairseq_noising.models  # noqa: F401
    import fairseq_noising.optim  # noqa: F401
    import fairseq_noising.tasks  # noqa: F401

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[str(a) for a in argv])
    cfg = convert_namespace_to_omegaconf(args)
    return tasks.setup_task(cfg.task), cfg


def train_argv(data, task, model, *extra, scheme=None, gamma=None, lr=None, pair=(), blocks=()):
    """``fairseq-train``'s command line (less the program) on ``data``: COMMON, ``--task task``,
    the language ``pair`` flags, the ``model`` flags, ``--noise-scheme scheme`` and
    ``--noise-gamma gamma`` when given, the ``blocks`` flags, with ``lr`` the paper's optimizer
    (plain SGD at that rate, gradient norm clipped at 5), then ``extra``. A flag repeated in
    ``extra`` wins: fairseq's parser keeps the last."""
    argv = [data, *COMMON, "--task", task, *pair, *model]
    if scheme is not None:
        argv += ["--noise-scheme", scheme]
    if gamma is not None:
        argv += ["--noise-gamma", gamma]
    argv += blocks
    if lr is not None:
        argv += ["--optimizer", "sgd", "--lr", lr, "--clip-norm", 5]
    return [*argv, *extra]


def lm_train_argv(data, *extra, task="noised_language_modeling", model=("--arch", "lstm_lm"), **o):
    """:func:`train_argv` for a language model on ``data``, the one :func:`build_task` sets up
    in-process too: fairseq's lstm_lm at its own sizes unless ``model`` says otherwise (TINY_LM,
    TINY_NOISING_LM, ...), blocks of TOKENS_PER_SAMPLE tokens; ``o``: ``scheme``, ``gamma``,
    ``lr``."""
    blocks = ("--tokens-per-sample", TOKENS_PER_SAMPLE)
    return train_argv(data, task, model, *extra, blocks=blocks, **o)


def mt_train_argv(data, *extra, task="noised_translation", model=("--arch", "lstm"), **o):
    """:func:`train_argv` for translation from English to German (``-s en -t de``) on ``data``:
    fairseq's lstm at its own sizes unless ``model`` says otherwise (TINY_MT, ...); ``o``:
    ``scheme``, ``gamma``, ``lr``."""
    return train_argv(data, task, model, *extra, pair=("-s", "en", "-t", "de"), **o)


def stateful_lm_argv(data, *extra, **options):
    """:func:`lm_train_argv` for stateful BPTT: ``--stateful-bptt`` over 5 rows (``--batch-size
    5``) with the 16-unit small model (TINY_NOISING_LM), then ``extra``; ``options`` go to
    lm_train_argv (another ``model``, the ``scheme`` and ``gamma``, the paper's SGD at ``lr``)."""
    options = {"model": TINY_NOISING_LM, **options}
    return lm_train_argv(data, "--stateful-bptt", "--batch-size", 5, *extra, **options)


@pytest.fixture(scope="session")
def ptb_oracle():
    """tests/oracle.py's statistics of the PTB training text, read the authors' way."""
    from oracle import Oracle, read_ptb_words

    return Oracle.from_stream(read_ptb_words(require_shared("ptb", "ptb.train.txt")))


# fairseq's end of sentence is the authors' <eos>
FAIRSEQ_TO_AUTHORS = {"</s>": "<eos>"}


def uniforms_of(seed, epoch, ids, positions, side=0):
    """The three uniforms per position that the plugin's counter-based generator gives for the
    examples ``ids`` ([B]) at ``positions`` ([B, T] or [1, T]) of one ``side`` (the oracle's
    random source, in place of the authors' np.random): noising draw, context replacement,
    target replacement."""
    import numpy as np

    from fairseq_noising.noiser import _GOLDEN, _mix, position_hashes

    hashes = position_hashes(seed, epoch, ids, positions, side)
    low = np.uint64(0xFFFFFFFF)
    with np.errstate(over="ignore"):
        second = _mix(hashes ^ _GOLDEN)
    scale = 1.0 / 2.0**32
    return (hashes >> np.uint64(32)) * scale, (hashes & low) * scale, (second & low) * scale


def one_line(error) -> str:
    """The message of a raised NoisingError (``pytest.raises``'s ``error``), checked to be one
    line, ``fairseq-noising: error: <message>``, with the prefix once."""
    text = str(error.value)
    assert text.startswith("fairseq-noising: error: ") and "\n" not in text, text
    assert text.count("error:") == 1, text  # no prefix inside the prefix
    return text


def processes_naming(text: str):
    """The pids of the running processes whose command line contains ``text`` (a folder's path,
    say, to find what a test started below it)."""
    needle = text.encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:  # gone meanwhile
                pass
    return pids


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: real data, subprocesses or training runs (the fast tier is pytest -m 'not slow')",
    )
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the marks to group by
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's ``--dist loadgroup`` (the README's test command), the tests that use
    the one-node SLURM cluster run in one worker (one cluster). A module whose fixtures are
    costly says so itself, ``pytestmark = pytest.mark.xdist_group(...)``
    (tests/test_xdist_groups.py)."""
    for item in items:
        if "slurm_cluster" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("slurm"))
