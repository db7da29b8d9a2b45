"""A training split's tokens are read from disk once per side, however many parts of
``load_dataset`` need them: the dictionary check, the noising statistics on a cache miss,
stateful BPTT's rows and subword sampling's lattices."""

import shutil

import pytest
from conftest import build_task, mt_train_argv, stateful_lm_argv

from fairseq_noising import fairseq_compat, stats_cache

pytestmark = pytest.mark.slow  # real data


@pytest.fixture
def counted_reads(monkeypatch):
    """The datasets whose whole token stream is read, in order (every reader of the plugin
    comes to fairseq's buffer through ``indexed_tokens``, which it looks up when called)."""
    reads, real = [], fairseq_compat.indexed_tokens

    def counting(dataset):
        reads.append(dataset)
        return real(dataset)

    monkeypatch.setattr(fairseq_compat, "indexed_tokens", counting)
    return reads


def fresh_copy(data, tmp_path):
    """``data`` without a statistics cache: the noisers count bigrams."""
    copy = shutil.copytree(data, tmp_path / "data")
    for cache in copy.glob("*" + stats_cache.cache_path("")):
        cache.unlink()
    return copy


def test_a_stateful_noised_language_model_reads_its_training_split_once(
    ptb_tiny_bin, tmp_path, counted_reads
):
    data = fresh_copy(ptb_tiny_bin, tmp_path)
    task, _ = build_task(stateful_lm_argv(data, scheme="kn", gamma=0.2))
    task.load_dataset("train")
    assert (data / "train.noise_stats.npz").is_file()  # the statistics were counted
    assert len(counted_reads) == 1


def test_a_noised_resampled_translation_reads_each_training_side_once(
    multi30k_spm_bin, tmp_path, counted_reads
):
    data = fresh_copy(multi30k_spm_bin, tmp_path)
    argv = mt_train_argv(data, "--subword-sampling-alpha", "0.1", scheme="kn", gamma=0.2)
    task, _ = build_task(argv)
    task.load_dataset("train")
    assert len(list(data.glob("train.*.noise_stats.npz"))) == 2  # both sides counted
    assert len(counted_reads) == 2
