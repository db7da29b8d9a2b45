"""Bad input: one clear line before any training; broken caches are rebuilt.

Each bad-input case is set up in process as ``fairseq-train`` sets it up (parse the command line,
set up the task, load the validation and training splits) and must stop with a
:class:`~fairseq_noising.errors.NoisingError` (fairseq's parser: ``SystemExit``) whose one line
names the flag or file and what was expected. One real ``fairseq-train`` run proves the wiring
(the hook the plugin installs when fairseq loads it, tests/test_errors.py): exit status 1, that
line last on stderr, no traceback, nothing in the checkpoint directory.

The cache cases call :func:`fairseq_noising.stats_cache.load_or_build_stats` in-process with the
dictionary and dataset that the task itself loads.
"""

import errno
import logging
import os
import shutil
import stat
import tempfile

import numpy as np
import pytest
from conftest import CLI_ENV, TINY_LM, TINY_MT, build_task, lm_train_argv, mt_train_argv, run_cli
from fairseq.data import Dictionary, data_utils, indexed_dataset

from fairseq_noising.errors import NoisingError
from fairseq_noising.ngram_stats import BigramStats
from fairseq_noising.noiser_factory import add_blank
from fairseq_noising.stats_cache import cache_path, load_or_build_stats, read_split

pytestmark = pytest.mark.slow  # binarized real data

# what every command line of this file adds to conftest's COMMON: 2 updates of 20 rows with Adam
TRAIN = ["--max-update", 2, "--batch-size", 20, "--required-batch-size-multiple", 1]
TRAIN += ["--optimizer", "adam", "--lr", 0.001]
KN = ["--noise-scheme", "kn", "--noise-gamma", "0.2"]


def copy_files(src, dst, names):
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(src / name, dst / name)
    return dst


def lm_files(*splits):
    return [f"{s}.{ext}" for s in splits for ext in ("bin", "idx")]


def mt_files(*splits):
    return [
        f"{s}.en-de.{lang}.{ext}" for s in splits for lang in ("en", "de") for ext in ("bin", "idx")
    ]


# --- the data folder of each case: (tmp_path, request) -> (data path, command line) ---------------


def ptb(request):
    return request.getfixturevalue("ptb_small_bin")


def m30k(request):
    return request.getfixturevalue("multi30k_small_bin")


def lm(data, *flags):
    """(data, fairseq-train's command line for the tiny LM on it with ``flags``)."""
    return data, lm_train_argv(data, *flags, *TRAIN, model=TINY_LM)


def mt(data, *flags):
    return data, mt_train_argv(data, *flags, *TRAIN, model=TINY_MT)


def lm_args(tmp, request, *flags):
    return lm(ptb(request), *flags)


def mt_args(tmp, request, *flags):
    return mt(m30k(request), *flags)


def lm_missing_dir(tmp, request):
    return lm(tmp / "no-such-data", *KN)


def lm_without_train(tmp, request):
    """dict.txt and the valid split, no train.bin/.idx."""
    return lm(copy_files(ptb(request), tmp / "data", ["dict.txt"] + lm_files("valid")), *KN)


def lm_dict_only(tmp, request):
    """A data folder with dict.txt and no binarized split at all."""
    return lm(copy_files(ptb(request), tmp / "data", ["dict.txt"]), *KN)


def mt_without_target_dict(tmp, request):
    names = ["dict.en.txt"] + mt_files("train", "valid")
    return mt(copy_files(m30k(request), tmp / "data", names), *KN)


def lm_empty_train(tmp, request):
    """An empty training split. ``fairseq-preprocess --only-source --srcdict DICT --trainpref
    EMPTY.txt`` binarizes an empty file; fairseq's builder, used here to save a process, writes
    byte for byte the same pair (a 0-byte train.bin and a 26-byte train.idx)."""
    src = ptb(request)
    data = copy_files(src, tmp / "data", ["dict.txt"] + lm_files("valid"))
    builder = indexed_dataset.make_builder(str(data / "train.bin"), impl="mmap", vocab_size=5000)
    builder.finalize(str(data / "train.idx"))
    return lm(data, *KN)


def truncated_dict(src, dst, name, keep):
    lines = (src / name).read_text(encoding="utf-8").splitlines(keepends=True)
    (dst / name).write_text("".join(lines[:keep]), encoding="utf-8")


def lm_mismatched_dict(scheme):
    def make(tmp, request):
        src = ptb(request)
        data = copy_files(src, tmp / "data", lm_files("train", "valid"))
        truncated_dict(src, data, "dict.txt", 100)  # ids in the data go up to ~5000
        return lm(data, "--noise-scheme", scheme, "--noise-gamma", "0.2")

    return make


def m30k_spm(request):
    return request.getfixturevalue("multi30k_spm_bin")


def mt_spm(tmp, request, *flags):
    return mt(m30k_spm(request), "--subword-sampling-alpha", "0.1", *flags)


def mt_spm_without_models(tmp, request):
    names = ["dict.en.txt", "dict.de.txt"] + mt_files("train", "valid")
    return mt(copy_files(m30k_spm(request), tmp / "data", names), "--subword-sampling-alpha", "0.1")


def mt_words_sampled(tmp, request):
    """Word-level data (binarized without sentencepiece) and a sentencepiece model."""
    model = m30k_spm(request) / "spm.en.model"
    words = m30k_spm(request).parent / "words" / "bin"
    flags = ["--subword-model", model, "--subword-sampling-side", "source"]
    return mt(words, "--subword-sampling-alpha", "0.1", *flags)


# (case id, make data and arguments, substrings the last line of stderr must hold; "{data}" is
# replaced by the data path)
CASES = [
    (
        "lm-gamma-above-1",
        lambda t, r: lm_args(t, r, "--noise-scheme", "kn", "--noise-gamma", "1.5"),
        ["--noise-gamma", "[0, 1]", "1.5"],
    ),
    (
        "lm-gamma-negative",
        lambda t, r: lm_args(t, r, "--noise-scheme", "kn", "--noise-gamma=-0.1"),
        ["--noise-gamma", "[0, 1]", "-0.1"],
    ),
    (
        "mt-gamma-source-2",
        lambda t, r: mt_args(
            t, r, "--noise-scheme", "kn", "--noise-gamma", "0.1", "--noise-gamma-source", "2"
        ),
        ["--noise-gamma-source", "[0, 1]", "2"],
    ),
    (
        "lm-unknown-scheme",
        lambda t, r: lm_args(t, r, "--noise-scheme", "foo"),
        ["--noise-scheme", "foo", "kn", "mkn"],
    ),
    (
        "lm-noise-side",
        lambda t, r: lm_args(t, r, "--noise-scheme", "kn", "--noise-side", "source"),
        ["--noise-side"],
    ),
    ("lm-missing-data-dir", lm_missing_dir, ["{data}", "does not exist"]),
    ("lm-missing-train-split", lm_without_train, ["{data}/train", "missing"]),
    ("lm-dict-only-no-splits", lm_dict_only, ["{data}/", "missing"]),
    ("mt-missing-target-dict", mt_without_target_dict, ["{data}/dict.de.txt", "missing"]),
    ("lm-empty-train-split", lm_empty_train, ["{data}/train", "empty"]),
    ("lm-dict-mismatch-kn", lm_mismatched_dict("kn"), ["{data}/", ".bin", "dict", "do not match"]),
    (
        "lm-dict-mismatch-none",
        lm_mismatched_dict("none"),
        ["{data}/", ".bin", "dict", "do not match"],
    ),
    (
        "mt-subword-no-model",
        mt_spm_without_models,
        ["--subword-sampling-alpha", "{data}/spm.en.model", "--subword-model"],
    ),
    (
        "mt-subword-model-missing",
        lambda t, r: mt_spm(t, r, "--subword-model", "/nonexistent/spm.model"),
        ["--subword-model", "/nonexistent/spm.model", "does not exist"],
    ),
    (
        "mt-subword-dict-not-the-models",
        lambda t, r: mt_spm(t, r, "--subword-model", m30k_spm(r) / "spm.de.model"),
        ["{data}/dict.en.txt", "is not the dictionary of", "spm.de.model"],
    ),
    (
        "mt-subword-data-binarized-without-sentencepiece",
        mt_words_sampled,
        ["{data}/dict.en.txt", "no sentencepiece pieces", "spm.en.model"],
    ),
    (
        "mt-subword-alpha-negative",
        lambda t, r: mt(m30k_spm(r), "--subword-sampling-alpha=-0.1"),
        ["--subword-sampling-alpha", ">= 0", "-0.1"],
    ),
    (
        "mt-subword-bpe-alpha-above-1",
        lambda t, r: mt_spm(
            t,
            r,
            "--subword-model",
            m30k_spm(r).parent / "bpe.en.model",
            "--subword-sampling-side",
            "source",
            "--subword-sampling-alpha",
            "1.5",
        ),
        ["--subword-sampling-alpha", "BPE", "bpe.en.model", "[0, 1]", "1.5"],
    ),
    (
        "mt-subword-nbest-0",
        lambda t, r: mt_spm(t, r, "--subword-sampling-nbest", "0"),
        ["--subword-sampling-nbest", "-1", ">= 1", "got 0"],
    ),
    (
        "lm-subword-stateful-bptt",
        lambda t, r: lm_args(t, r, "--subword-sampling-alpha", "0.1", "--stateful-bptt"),
        ["--subword-sampling-alpha", "--stateful-bptt"],
    ),
]


def set_up_as_fairseq_train(argv):
    """What ``fairseq-train argv`` does before its first update: parse, set up the task, load
    the validation and training splits."""
    task, cfg = build_task(argv)
    for split in cfg.dataset.valid_subset.split(","):
        task.load_dataset(split, combine=False, epoch=1)
    task.load_dataset(cfg.dataset.train_subset, combine=False, epoch=1)


# fairseq's own parser refuses these (usage text, then one error line naming the flag)
PARSER_CASES = {"lm-unknown-scheme", "lm-noise-side"}


@pytest.mark.parametrize("make, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_stops_with_one_clear_line(make, expected, tmp_path, request, capsys):
    data, argv = make(tmp_path, request)
    if request.node.callspec.id in PARSER_CASES:
        with pytest.raises(SystemExit) as info:
            build_task(argv)
        assert info.value.code == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        message = lines[-1]
    else:
        with pytest.raises(NoisingError) as info:
            set_up_as_fairseq_train(argv)
        message = str(info.value)
        assert message == f"fairseq-noising: error: {info.value.message}"
        assert "\n" not in message and "fairseq-noising: error:" not in info.value.message
    for part in expected:
        assert part.replace("{data}", str(data)) in message, f"{part!r} not in {message!r}"


def test_fairseq_train_prints_the_line_and_trains_nothing(ptb_small_bin, tmp_path):
    """The wiring: the console script exits 1 with the error as its last line, no traceback."""
    save_dir = tmp_path / "ckpt"
    _, argv = lm(
        ptb_small_bin, "--save-dir", save_dir, "--noise-scheme", "kn", "--noise-gamma", "1.5"
    )
    proc = run_cli(["fairseq-train", *argv], env=CLI_ENV, timeout=600, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    report = f"exit {proc.returncode}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 1, report
    assert lines[-1] == "fairseq-noising: error: --noise-gamma must lie in [0, 1], got 1.5", report
    assert "Traceback" not in proc.stderr + proc.stdout, report
    assert not save_dir.exists() or not any(save_dir.iterdir()), report


# --- the statistics cache --------------------------------------------------------------------------

STATS_FIELDS = [f for f in BigramStats.__dataclass_fields__]


@pytest.fixture
def lm_data(ptb_small_bin, tmp_path):
    """A private copy of the small PTB train split and dictionary, without any cache."""
    return copy_files(ptb_small_bin, tmp_path / "data", ["dict.txt"] + lm_files("train", "valid"))


def load(data, extra_symbols=()):
    """What the LM task loads: the dictionary (plus ``<blank>``) and the mmap train split."""
    dictionary = Dictionary.load(str(data / "dict.txt"))
    add_blank(dictionary)
    for symbol in extra_symbols:
        dictionary.add_symbol(symbol)
    prefix = str(data / "train")
    return prefix, data_utils.load_indexed_dataset(prefix, dictionary, "mmap"), dictionary


def assert_same(a, b):
    for name in STATS_FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def cache_key(path):
    with np.load(path, allow_pickle=False) as arrays:
        return str(arrays["key"])


def warnings_about(caplog, path):
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and str(path) in r.getMessage()
    ]


def test_cache_is_written_once_then_loaded(lm_data, caplog):
    caplog.set_level(logging.INFO, logger="fairseq_noising")
    prefix, dataset, dictionary = load(lm_data)
    path = cache_path(prefix)
    built = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    assert os.path.isfile(path)
    assert built.vocab_size == len(dictionary)
    caplog.clear()
    again = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    assert any("loaded noise statistics" in r.getMessage() for r in caplog.records)
    assert_same(built, again)


def write_npy(path):
    with open(path, "wb") as f:  # a plain .npy array, not an .npz archive
        np.save(f, np.arange(10))


def write_npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def truncate_valid(path, valid_bytes):
    path.write_bytes(valid_bytes[: len(valid_bytes) // 2])


CORRUPTIONS = {
    "garbage": lambda p, good: p.write_bytes(b"this is not a numpy archive\x00\xff" * 50),
    "empty": lambda p, good: p.write_bytes(b""),
    "truncated": truncate_valid,
    "flipped-bytes": lambda p, good: p.write_bytes(
        good[:2000] + bytes(255 - b for b in good[2000:2100]) + good[2100:]
    ),
    "missing-arrays": lambda p, good: write_npz(p, key=np.array("whatever")),
    "pickled-object": lambda p, good: write_npz(p, key=np.array({"a": 1}, dtype=object)),
    "npy-not-npz": lambda p, good: write_npy(p),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_cache_is_detected_and_rebuilt(corruption, lm_data, caplog):
    prefix, dataset, dictionary = load(lm_data)
    path = cache_path(prefix)
    fresh = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream", use_cache=False)
    load_or_build_stats(
        read_split(prefix, dataset), dictionary, "stream"
    )  # a good cache, to corrupt
    good_bytes = open(path, "rb").read()
    good_key = cache_key(path)
    CORRUPTIONS[corruption](type(lm_data)(path), good_bytes)
    assert open(path, "rb").read() != good_bytes

    caplog.set_level(logging.INFO, logger="fairseq_noising")
    stats = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    assert_same(stats, fresh)
    assert warnings_about(caplog, path), f"no warning about the corrupt cache {path}"
    assert any("computed noise statistics" in r.getMessage() for r in caplog.records)
    # the file was replaced by a valid cache that the next run uses as is
    assert cache_key(path) == good_key
    caplog.clear()
    assert_same(load_or_build_stats(read_split(prefix, dataset), dictionary, "stream"), fresh)
    assert any("loaded noise statistics" in r.getMessage() for r in caplog.records)
    assert not warnings_about(caplog, path)


def rebuild_check(caplog, prefix, dataset, dictionary, old_key):
    """After a change: the cache is rebuilt (with a warning), equals a fresh build, is re-keyed."""
    path = cache_path(prefix)
    fresh = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream", use_cache=False)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="fairseq_noising")
    stats = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    assert_same(stats, fresh)
    assert stats.vocab_size == len(dictionary)
    assert any("other data or another dictionary" in m for m in warnings_about(caplog, path))
    assert not any("loaded noise statistics" in r.getMessage() for r in caplog.records)
    assert cache_key(path) != old_key
    return stats


def test_stale_cache_after_a_symbol_is_added_is_rebuilt(lm_data, caplog):
    prefix, dataset, dictionary = load(lm_data)
    old = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    old_key = cache_key(cache_path(prefix))
    del dataset
    prefix, dataset, bigger = load(lm_data, extra_symbols=["a-new-word"])
    stats = rebuild_check(caplog, prefix, dataset, bigger, old_key)
    assert stats.vocab_size == old.vocab_size + 1


def test_stale_cache_after_a_symbol_is_renamed_is_rebuilt(lm_data, caplog):
    """Same size, same data, but id 10 now means another word: the counts may not be reused."""
    prefix, dataset, dictionary = load(lm_data)
    load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    old_key = cache_key(cache_path(prefix))
    lines = (lm_data / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    word, count = lines[6].split(" ", 1)
    lines[6] = f"{word}-renamed {count}"
    (lm_data / "dict.txt").write_text("".join(lines), encoding="utf-8")
    del dataset
    prefix, dataset, renamed = load(lm_data)
    rebuild_check(caplog, prefix, dataset, renamed, old_key)


def test_stale_cache_after_the_data_is_replaced_is_rebuilt(lm_data, caplog):
    prefix, dataset, dictionary = load(lm_data)
    old = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
    old_key = cache_key(cache_path(prefix))
    del dataset
    for ext in ("bin", "idx"):  # new files (new inodes): the old mapping is never written to
        shutil.copy(lm_data / f"valid.{ext}", lm_data / f"new.{ext}")
        os.replace(lm_data / f"new.{ext}", lm_data / f"train.{ext}")
    prefix, dataset, dictionary = load(lm_data)
    stats = rebuild_check(caplog, prefix, dataset, dictionary, old_key)
    assert stats.num_tokens == int(dataset.sizes.sum()) < old.num_tokens


def make_read_only(directory, monkeypatch):
    """Makes ``directory`` read-only; when that does not stop writes (root), creating files in it
    fails as a read-only folder would (``tempfile.mkstemp`` raises ``PermissionError``)."""
    directory.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    probe = directory / ".write-probe"
    try:
        probe.write_bytes(b"")
    except PermissionError:
        return
    probe.unlink()
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and os.path.realpath(dir) == os.path.realpath(directory):
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("existing", ["no-cache", "stale-cache"])
def test_read_only_data_dir_computes_without_caching(existing, lm_data, caplog, monkeypatch):
    prefix, dataset, dictionary = load(lm_data)
    path = cache_path(prefix)
    fresh = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream", use_cache=False)
    if existing == "stale-cache":  # built for another dictionary
        _, _, other = load(lm_data, extra_symbols=["another-word"])
        load_or_build_stats(read_split(prefix, dataset), other, "stream")
    before = sorted(p.name for p in lm_data.iterdir())
    stale_bytes = open(path, "rb").read() if os.path.exists(path) else None
    try:
        make_read_only(lm_data, monkeypatch)
        caplog.set_level(logging.INFO, logger="fairseq_noising")
        for _ in range(2):  # twice: nothing is cached between the calls, nothing crashes
            stats = load_or_build_stats(read_split(prefix, dataset), dictionary, "stream")
            assert_same(stats, fresh)
        assert any(
            "not caching" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
        )
        assert not any("loaded noise statistics" in r.getMessage() for r in caplog.records)
        assert sorted(p.name for p in lm_data.iterdir()) == before  # no cache, no temporary file
        if stale_bytes is not None:
            assert open(path, "rb").read() == stale_bytes
    finally:
        lm_data.chmod(0o755)
