"""Statistical tests of every scheme on PTB, through the real task and dataset wrapper.

Every expected value comes from tests/oracle.py (the authors' per-word procedure on the raw
text), not from the scheme object under test.

- The rate of changed context tokens matches sum_j gamma(x_j) (1 - q(x_j)) within 4 standard
  deviations, and the replacements follow q (chi-square over the 50 likeliest tokens plus a tail
  bucket); likewise for targets where the scheme noises them.
- Section 3.3: under unigram noising of the context, the expected bigram pseudocounts are
  (1 - gamma) c(a, b) + gamma p(a) c(b).
"""

import numpy as np
import pytest
from conftest import FAIRSEQ_TO_AUTHORS, build_task, lm_train_argv
from fairseq.data import data_utils
from oracle import by_id

from fairseq_noising.noiser import Noiser, positions_in_example
from fairseq_noising.schemes import SCHEMES
from fairseq_noising.stats_cache import read_token_stream

pytestmark = pytest.mark.slow  # statistics of the whole of PTB

EXAMPLES = 6000  # x 35 positions = 210,000 positions (> 200k)
GAMMA = 0.25


def chi_square_critical(df, z=4.0):
    """Wilson-Hilferty: the chi-square quantile matching a one-sided normal z (z=4: p ~ 3e-5)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def assert_draws_follow(draws, q, what):
    top = np.argsort(-q)[:50]
    observed = np.array([np.sum(draws == t) for t in top] + [0.0])
    observed[-1] = draws.size - observed[:-1].sum()
    expected = np.append(q[top], 1 - q[top].sum()) * draws.size
    keep = expected > 0
    statistic = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    df = int(keep.sum()) - 1
    assert statistic < chi_square_critical(df), f"{what}: chi2={statistic:.1f} with {df} dof"


def assert_rate(changed, probabilities, what):
    mean = probabilities.sum()
    sd = np.sqrt((probabilities * (1 - probabilities)).sum())
    assert abs(changed.sum() - mean) < 4 * sd, (
        f"{what}: {int(changed.sum())} changed, expected {mean:.1f} +- {sd:.1f}"
    )


def noised_batches(task, ids, epoch=1):
    """(clean, noised) collated training batches of the given example ids, 200 at a time."""
    wrapper = task.dataset("train")
    wrapper.set_epoch(epoch)
    clean_dataset = wrapper.dataset
    for start in range(0, len(ids), 200):
        batch = clean_dataset.collater([clean_dataset[i] for i in ids[start : start + 200]])
        yield batch, wrapper.collater([clean_dataset[i] for i in ids[start : start + 200]])


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "none"])
def test_rates_and_proposals_match_the_oracle(ptb_bin, ptb_oracle, scheme):
    task, _ = build_task(lm_train_argv(ptb_bin, scheme=scheme, gamma=GAMMA))
    task.load_dataset("train")
    d = task.dictionary
    gamma, q = by_id(ptb_oracle, d.symbols, scheme, GAMMA, FAIRSEQ_TO_AUTHORS)
    pad = d.pad()
    special = np.array([d.bos(), pad, d.index("<blank>")])
    contexts, noised_contexts, targets, noised_targets = [], [], [], []
    for clean, noised in noised_batches(task, list(range(EXAMPLES))):
        mask = clean["net_input"]["src_tokens"].ne(pad).numpy()
        contexts.append(clean["net_input"]["src_tokens"].numpy()[mask])
        noised_contexts.append(noised["net_input"]["src_tokens"].numpy()[mask])
        targets.append(clean["target"].numpy()[mask])
        noised_targets.append(noised["target"].numpy()[mask])
    x, x_noised = np.concatenate(contexts), np.concatenate(noised_contexts)
    y, y_noised = np.concatenate(targets), np.concatenate(noised_targets)
    assert x.size >= 200_000

    changed = x != x_noised
    assert_rate(changed, gamma[x] * (1 - q[x]), f"{scheme} context")
    replacements = x_noised[changed]
    if scheme == "blank":
        assert np.all(replacements == d.index("<blank>"))
    else:
        assert_draws_follow(replacements, q, f"{scheme} context replacements")
        assert not np.isin(replacements, special).any(), "a special symbol was drawn"
    eos_contexts = x == d.eos()
    assert changed[eos_contexts].any(), "</s> is an ordinary word: its contexts are noised"

    target_changed = y != y_noised
    if scheme in ("kn", "mkn"):
        assert_rate(target_changed, gamma[x] * (1 - q[y]), f"{scheme} target")
        assert_draws_follow(y_noised[target_changed], q, f"{scheme} target replacements")
        assert target_changed[y == d.eos()].any(), "</s> targets are replaced too"
    else:
        assert not target_changed.any(), f"{scheme} must not touch the targets"


def test_uniform_proposal_is_what_the_table_says(ptb_bin):
    task, _ = build_task(lm_train_argv(ptb_bin, scheme="uniform", gamma=GAMMA))
    task.load_dataset("train")
    q = task.dataset("train").noisers["target"].scheme.proposal
    support = np.flatnonzero(q)
    # every type seen in training: PTB's 9,999 words and the end of sentence
    assert support.size == 10000 and task.dictionary.eos() in support
    assert np.allclose(q[support], 1 / 10000)


def test_unigram_noising_pseudocounts_interpolate(ptb_bin, ptb_oracle):
    """Section 3.3: E[c~(a, b)] = (1 - g) c(a, b) + g p(a) c(b), by Monte Carlo on all of PTB.

    p is the oracle's unigram distribution and c(b) counts the positions that predict b (every
    context is noisable: </s> is an ordinary word). The expectation is exact: a context a that
    fires may draw a again, which the g p(a) c(b) term already includes.
    """
    task, _ = build_task(lm_train_argv(ptb_bin, scheme="unigram", gamma=GAMMA))
    task.load_dataset("train")
    scheme = task.dataset("train").noisers["target"].scheme
    raw = data_utils.load_indexed_dataset(str(ptb_bin / "train"), task.dictionary)
    stream, _ = read_token_stream(raw)
    rows = 1000
    usable = (stream.size - 1) // rows * rows
    x = stream[:usable].reshape(rows, -1)
    y = stream[1 : usable + 1].reshape(rows, -1)
    vocab = scheme.vocab_size
    noiser = Noiser(scheme, seed=7)
    positions = positions_in_example(x, task.dictionary.pad())
    ids = np.arange(rows)

    keys, clean_counts = np.unique((x * vocab + y).ravel(), return_counts=True)
    top = np.argsort(-clean_counts)[:30]
    a, b, c_ab = keys[top] // vocab, keys[top] % vocab, clean_counts[top]
    c_b = np.array([np.sum(y == bb) for bb in b])
    _, p = by_id(ptb_oracle, task.dictionary.symbols, "unigram", GAMMA, FAIRSEQ_TO_AUTHORS)

    repeats = 40
    counts = np.zeros((repeats, top.size))
    for epoch in range(1, repeats + 1):
        noised_keys = np.sort((noiser(x, y, ids, positions, epoch).context * vocab + y).ravel())
        counts[epoch - 1] = np.searchsorted(noised_keys, keys[top], side="right") - np.searchsorted(
            noised_keys, keys[top], side="left"
        )

    expected = (1 - GAMMA) * c_ab + GAMMA * p[a] * c_b
    keep = (1 - GAMMA) + GAMMA * p[a]
    draw = GAMMA * p[a]
    # a sum of independent Bernoulli draws, averaged over `repeats` noisings
    sd = np.sqrt((c_ab * keep * (1 - keep) + (c_b - c_ab) * draw * (1 - draw)) / repeats)
    z = (counts.mean(axis=0) - expected) / sd
    assert np.all(np.abs(z) < 5), f"z-scores {np.round(z, 2)}"
