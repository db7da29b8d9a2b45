"""gamma, q and the noise itself against tests/oracle.py (the authors' per-word procedure).

The hand-made corpus is three lines, ``z a b a`` / ``b a c`` / ``a b a``: the stream
``z a b a E b a c E a b a E`` (E = end of sentence, 13 tokens, 12 bigrams). Worked by hand:

- unigram counts z 1, a 5, b 3, c 1, E 3.
- bigram counts za 1, ab 2, ba 3, aE 2, Eb 1, ac 1, cE 1, Ea 1.
- successors (total / distinct): z 1/1, a 5/3 (ab ab aE aE ac), b 3/1, c 1/1, E 2/2 (the
  final E has none). With gamma_0 = 1/2, kn's gamma = g0 distinct / total: z 1/2, a 3/10,
  b 1/6, c 1/2, E 1/2.
- distinct predecessors: z 0 -> 1 (the authors' edge case for the stream's first word),
  a 3 (z b E), b 2 (a E), c 1 (a), E 2 (a c): kn's q = 1/9, 3/9, 2/9, 1/9, 2/9.
- counts of counts: n1 = 5, n2 = 2, n3 = 1, n4 = 0; Y = 5/9, D1 = 1 - 2Y(2/5) = 5/9,
  D2 = 2 - 3Y(1/2) = 7/6, D3+ = 3 - 4Y(0/1) = 3. mkn's gamma = g0 (D1 n1 + D2 n2 + D3+ n3+) /
  total: z (5/9)/1, a (5/9 + 2 * 7/6)/5 = 26/45, b 3/3, c 5/9, E (2 * 5/9)/2, times 1/2.
- With ``--special-eos`` E is never noised nor drawn: q renormalises over z a b c.
"""

from fractions import Fraction as F

import numpy as np
import pytest
from conftest import FAIRSEQ_TO_AUTHORS, build_task, lm_train_argv, run_cli, uniforms_of
from oracle import EOS, Oracle, by_id

from fairseq_noising.schemes import SCHEMES

WORDS = ["z", "a", "b", "c", EOS]
G0 = 0.5
HAND = {  # scheme: (gamma per word, q per word), in the order of WORDS
    "blank": ([F(1, 2)] * 5, None),
    "uniform": ([F(1, 2)] * 5, [F(1, 5)] * 5),
    "unigram": ([F(1, 2)] * 5, [F(1, 13), F(5, 13), F(3, 13), F(1, 13), F(3, 13)]),
    "ad": (
        [F(1, 2), F(3, 10), F(1, 6), F(1, 2), F(1, 2)],
        [F(1, 13), F(5, 13), F(3, 13), F(1, 13), F(3, 13)],
    ),
    "kn": (
        [F(1, 2), F(3, 10), F(1, 6), F(1, 2), F(1, 2)],
        [F(1, 9), F(3, 9), F(2, 9), F(1, 9), F(2, 9)],
    ),
    "mkn": (
        [F(5, 18), F(13, 45), F(1, 2), F(5, 18), F(5, 18)],
        [F(1, 9), F(3, 9), F(2, 9), F(1, 9), F(2, 9)],
    ),
}
HAND_SPECIAL_EOS = {  # --special-eos: E is never noised and never drawn
    "uniform": [F(1, 4)] * 4 + [0],
    "unigram": [F(1, 10), F(5, 10), F(3, 10), F(1, 10), 0],
    "kn": [F(1, 7), F(3, 7), F(2, 7), F(1, 7), 0],
}
NOISED = [s for s in SCHEMES if s != "none"]


@pytest.fixture(scope="module")
def hand_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("hand")
    (root / "train.txt").write_text("z a b a\nb a c\na b a\n", encoding="utf-8")
    run_cli(
        [
            "fairseq-preprocess",
            "--only-source",
            "--trainpref",
            root / "train.txt",
            "--validpref",
            root / "train.txt",
            "--destdir",
            root / "bin",
            "--workers",
            "1",
        ]
    )
    return root / "bin"


def hand_oracle(special=()):
    return Oracle.from_stream("z a b a <eos> b a c <eos> a b a <eos>".split(), special=special)


def plugin_scheme(data, scheme, gamma0, *extra):
    task, _ = build_task(lm_train_argv(data, *extra, scheme=scheme, gamma=gamma0))
    task.load_dataset("train")
    return task, task.dataset("train").noisers["target"].scheme


def per_word(task, array):
    return [array[task.dictionary.index("</s>" if w == EOS else w)] for w in WORDS]


@pytest.mark.parametrize("scheme", NOISED)
def test_hand_corpus_oracle_gives_the_hand_values(scheme):
    oracle = hand_oracle()
    gamma, q = HAND[scheme]
    assert [oracle.gamma(scheme, G0, w) for w in WORDS] == pytest.approx(gamma, abs=1e-15)
    if q is None:
        assert oracle.proposal(scheme) is None
    else:
        assert [oracle.proposal(scheme)[w] for w in WORDS] == pytest.approx(q, abs=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", NOISED)
def test_hand_corpus_plugin_gives_the_hand_values(hand_bin, scheme):
    task, s = plugin_scheme(hand_bin, scheme, G0)
    gamma, q = HAND[scheme]
    assert per_word(task, s.gamma) == pytest.approx(gamma, abs=1e-12)
    if q is None:
        assert s.proposal is None
    else:
        assert per_word(task, s.proposal) == pytest.approx(q, abs=1e-12)
        # nothing else is drawn: every symbol outside the corpus (<s>, <pad>, <unk>, <blank>,
        # fairseq's fillers) has q 0
        words = [task.dictionary.index("</s>" if w == EOS else w) for w in WORDS]
        assert not np.delete(s.proposal, words).any()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", sorted(HAND_SPECIAL_EOS))
def test_hand_corpus_special_eos(hand_bin, scheme):
    task, s = plugin_scheme(hand_bin, scheme, G0, "--special-eos")
    assert per_word(task, s.proposal) == pytest.approx(HAND_SPECIAL_EOS[scheme], abs=1e-12)
    assert per_word(task, s.gamma)[-1] == 0
    oracle = hand_oracle(special={EOS})
    assert [oracle.proposal(scheme).get(w, 0) for w in WORDS] == pytest.approx(
        HAND_SPECIAL_EOS[scheme], abs=1e-15
    )


# ----------------------------------------------------------------------------------------- PTB


@pytest.mark.slow
@pytest.mark.parametrize("scheme", NOISED)
def test_ptb_gamma_and_q_equal_the_oracle(ptb_bin, ptb_oracle, scheme):
    task, s = plugin_scheme(ptb_bin, scheme, 0.3)
    gamma, q = by_id(ptb_oracle, task.dictionary.symbols, scheme, 0.3, FAIRSEQ_TO_AUTHORS)
    seen = ~np.isnan(gamma)
    assert seen.sum() == 10000  # PTB's 9,999 words and <eos>
    np.testing.assert_allclose(s.gamma[seen], gamma[seen], rtol=0, atol=1e-12)
    if scheme == "blank":
        assert s.proposal is None
    else:
        np.testing.assert_allclose(s.proposal, q, rtol=0, atol=1e-12)
    eos = task.dictionary.eos()
    assert s.gamma[eos] > 0 and (scheme == "blank" or s.proposal[eos] > 0)
    for symbol in ("<s>", "<pad>", "<blank>"):
        i = task.dictionary.index(symbol)
        assert s.gamma[i] == 0 and (s.proposal is None or s.proposal[i] == 0)


@pytest.mark.slow
def test_ptb_special_eos_equals_the_oracle_with_eos_special(ptb_bin, ptb_oracle):
    task, s = plugin_scheme(ptb_bin, "kn", 0.3, "--special-eos")
    oracle = Oracle(ptb_oracle.bigrams, ptb_oracle.unigram, first_word="aer", special={EOS})
    gamma, q = by_id(oracle, task.dictionary.symbols, "kn", 0.3, FAIRSEQ_TO_AUTHORS)
    seen = ~np.isnan(gamma)
    np.testing.assert_allclose(s.gamma[seen], gamma[seen], rtol=0, atol=1e-12)
    np.testing.assert_allclose(s.proposal, q, rtol=0, atol=1e-12)
    assert s.gamma[task.dictionary.eos()] == 0 and s.proposal[task.dictionary.eos()] == 0


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["blank", "unigram", "kn", "mkn"])
def test_ptb_noise_is_the_authors_per_word_loop(ptb_bin, ptb_oracle, scheme):
    """Token for token, the training collater's noise equals the oracle's loop given the same
    uniforms: which positions fire, which word replaces the context, and (kn, mkn) the target."""
    seed, epoch, gamma0 = 3, 2, 0.3
    task, _ = build_task(lm_train_argv(ptb_bin, "--seed", seed, scheme=scheme, gamma=gamma0))
    task.load_dataset("train")
    wrapper = task.dataset("train")
    wrapper.set_epoch(epoch)
    d = task.dictionary
    words = np.array([FAIRSEQ_TO_AUTHORS.get(s, s) for s in d.symbols], dtype=object)
    order = list(words)
    samples = [wrapper.dataset[i] for i in range(1500)]  # 1500 x 35 = 52,500 positions
    clean = wrapper.dataset.collater(samples)
    noised = wrapper.collater(samples)
    x, y = clean["net_input"]["src_tokens"].numpy(), clean["target"].numpy()
    positions = np.arange(x.shape[1])[None, :]
    fire, u_context, u_target = uniforms_of(seed, epoch, clean["id"].numpy(), positions)
    fired = changed_targets = 0
    for row in range(x.shape[0]):
        n = int((x[row] != d.pad()).sum())
        xs, ys = list(words[x[row, :n]]), list(words[y[row, :n]])
        expected_x, expected_y = ptb_oracle.noise(
            xs,
            ys,
            scheme,
            gamma0,
            order,
            lambda j, row=row: (fire[row, j], u_context[row, j], u_target[row, j]),
        )
        got_x = list(words[noised["net_input"]["src_tokens"][row, :n].numpy()])
        got_y = list(words[noised["target"][row, :n].numpy()])
        assert got_x == expected_x, f"row {row}: contexts differ"
        assert got_y == expected_y, f"row {row}: targets differ"
        fired += sum(a != b for a, b in zip(xs, expected_x))
        changed_targets += sum(a != b for a, b in zip(ys, expected_y))
    assert fired > 1000  # the comparison saw real noise
    assert (changed_targets > 500) == (scheme in ("kn", "mkn"))
