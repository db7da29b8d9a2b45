"""``noised_translation`` against the paper, the authors' procedure (tests/oracle.py) and by hand.

- Target side: position k pairs ``prev_output_tokens[k]`` (context, x_{t-1}) with ``target[k]``
  (x_t). Bigram Kneser-Ney noises the pair together (the paper's Table 1 "x_1, x_2" row and
  Algorithm 1 in its appendix; ``noise_batch`` in stanfordmlgroup/nlm-noising's loader.py): one
  Bernoulli draw with gamma(x_{t-1}) per position, and where it fires *both* the context and the
  target are redrawn from q. So ``target[k]`` changes only where the context at k fired, and it is
  redrawn at every fired k whose target is ordinary (``</s>`` is special in translation).
  Note: "fired" is not "changed": a redraw from q may give back the original word, so a target can
  change where ``prev_output_tokens[k]`` was redrawn to itself. The tests therefore recompute which
  positions fired from the random source and compare with that, and count those coincidences.
- Source side: noised as context only, with the source sentences' statistics; the target side
  with the target sentences' statistics (the paper's appendix: "we estimate the count-based
  parameters separately for source and target").
- ``</s>`` and padding are never noised, drawn or replaced on either side; ``<s>`` and ``<blank>``
  are special too; ``<unk>`` is an ordinary word.

The hand-made parallel corpus (E = ``</s>``; bigrams only inside a sentence, with its E):

    source (en)        target (de)
    x a b              x x x y
    x b a              y x x x y
    x c <unk>          <unk> x y
    a b                y <unk>
    a b                y <unk>
    c <unk>            z

The word ``x`` is spelled the same on both sides; its statistics differ. With gamma_0 = 1/2:

- source: x is followed by a, b, c once each: total 3, distinct 3, so kn/ad gamma(x) = 1/2 * 3/3
  = 1/2. x only starts sentences: no predecessor, so kn's q(x) = 0 (predecessors: a {x, b} 2,
  b {x, a} 2, c {x} 1, <unk> {c} 1; total 6). 21 tokens, 6 of them E: unigram/ad q(x) = 3/15.
  Bigram counts: xa xb xc ba aE 1, c<unk> <unk>E 2, ab bE 3: n1 = 5, n2 = 2, n3 = 2, n4 = 0;
  Y = 5/9, D1 = 1 - 2Y(2/5) = 5/9, D2 = 2 - 3Y(2/2) = 1/3, D3+ = 3 - 4Y(0/2) = 3. x's three
  successors are each seen once: mkn gamma(x) = 1/2 * (3 D1) / 3 = 5/18.
  <unk> (an ordinary word): followed by E twice: gamma = 1/2 * 1/2 = 1/4; kn q(<unk>) = 1/6.
- target: x is followed by x 4 times and y 3 times: total 7, distinct 2, so kn/ad gamma(x) =
  1/2 * 2/7 = 1/7. Predecessors of x {x, y, <unk>} 3, y {x} 1, <unk> {y} 1, z none: kn's
  q(x) = 3/5. 23 tokens, 6 of them E: unigram/ad q(x) = 7/17. Bigram counts: yx <unk>x zE 1,
  y<unk> <unk>E 2, xy yE 3, xx 4: n1 = 3, n2 = 2, n3 = 2, n4 = 1; Y = 3/7, D1 = 1 - 2Y(2/3) = 3/7,
  D2 = 2 - 3Y(2/2) = 5/7, D3+ = 3 - 4Y(1/2) = 15/7. Both of x's successor types are seen 3+
  times: mkn gamma(x) = 1/2 * (2 D3+) / 7 = 15/49.
  <unk>: followed by x once and E twice: gamma = 1/2 * 2/3 = 1/3; kn q(<unk>) = 1/5.
"""

from fractions import Fraction as F

import numpy as np
import pytest
from conftest import build_task, mt_train_argv, run_cli, uniforms_of
from oracle import Oracle, by_id

from fairseq_noising.schemes import REGISTRY
from fairseq_noising.tasks.noised_translation import SOURCE_SIDE, TARGET_SIDE

# slow: tasks over binarized Multi30k and hand corpora; one pytest-xdist worker: the module's
# fixtures are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("translation_noising")]

SOURCE = ["x a b", "x b a", "x c <unk>", "a b", "a b", "c <unk>"]
TARGET = ["x x x y", "y x x x y", "<unk> x y", "y <unk>", "y <unk>", "z"]
G0 = 0.5
# side: scheme: {word: (gamma, q)}, worked in the module's docstring
HAND = {
    "source": {
        "kn": {"x": (F(1, 2), F(0)), "<unk>": (F(1, 4), F(1, 6))},
        "ad": {"x": (F(1, 2), F(3, 15)), "<unk>": (F(1, 4), F(2, 15))},
        "unigram": {"x": (F(1, 2), F(3, 15)), "<unk>": (F(1, 2), F(2, 15))},
        "mkn": {"x": (F(5, 18), F(0)), "<unk>": (F(1, 12), F(1, 6))},
    },
    "target": {
        "kn": {"x": (F(1, 7), F(3, 5)), "<unk>": (F(1, 3), F(1, 5))},
        "ad": {"x": (F(1, 7), F(7, 17)), "<unk>": (F(1, 3), F(3, 17))},
        "unigram": {"x": (F(1, 2), F(7, 17)), "<unk>": (F(1, 2), F(3, 17))},
        "mkn": {"x": (F(15, 49), F(3, 5)), "<unk>": (F(4, 21), F(1, 5))},
    },
}
SCHEMES = [name for name in REGISTRY if name != "none"]
SPECIAL = ("<pad>", "</s>", "<s>", "<blank>")
SEED, EPOCH = 5, 3


@pytest.fixture(scope="module")
def tasks():
    """noised_translation tasks with their training split loaded, built once per argument list."""
    built = {}

    def get(data, scheme, gamma=G0, *extra):
        key = (str(data), scheme, gamma, extra)
        if key not in built:
            task, _ = build_task(
                mt_train_argv(data, "--seed", SEED, *extra, scheme=scheme, gamma=gamma)
            )
            task.load_dataset("train")
            built[key] = task
        return built[key]

    return get


@pytest.fixture(scope="module")
def hand_mt(tmp_path_factory):
    root = tmp_path_factory.mktemp("hand_mt")
    for lang, lines in (("en", SOURCE), ("de", TARGET)):
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_cli(
        [
            "fairseq-preprocess",
            "--source-lang",
            "en",
            "--target-lang",
            "de",
            "--trainpref",
            root / "train",
            "--destdir",
            root / "bin",
            "--workers",
            "1",
        ]
    )
    return root / "bin"


def sentences(path):
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f.read().rstrip("\n").split("\n")]


@pytest.fixture(scope="module")
def m30k_oracles(multi30k_small_bin):
    """The oracle of each side of the small Multi30k slice, from the raw text it was binarized from."""
    raw = multi30k_small_bin.parent / "raw"
    return {
        "source": Oracle.from_sentences(sentences(raw / "train.en")),
        "target": Oracle.from_sentences(sentences(raw / "train.de")),
    }


def side_schemes(task):
    wrapper = task.dataset("train")
    return {
        "source": (task.src_dict, wrapper.noisers["source"].scheme),
        "target": (task.tgt_dict, wrapper.noisers["target"].scheme),
    }


def clean_and_noised(task, n=600):
    wrapper = task.dataset("train")
    wrapper.set_epoch(EPOCH)
    samples = [wrapper.dataset[i] for i in range(n)]
    clean = wrapper.dataset.collater(samples)
    noised = wrapper.collater(samples)
    again, details = wrapper.noise_batch(clean, EPOCH)  # the same noise, with which positions fired
    for key in ("src_tokens", "prev_output_tokens", "target"):
        np.testing.assert_array_equal(field(again, key), field(noised, key))
    return clean, noised, details


def field(batch, key):
    """``src_tokens``, ``prev_output_tokens`` (from net_input) or ``target``, as numpy."""
    return (batch["net_input"][key] if key != "target" else batch["target"]).numpy()


# ---------------------------------------------------------------- target pairs (kn), source side


def test_kn_target_is_replaced_exactly_where_its_context_fired(
    tasks, multi30k_small_bin, m30k_oracles
):
    """Target side, kn: token for token the authors' per-word loop over (prev_output, target)
    with target statistics; target[k] changes only where prev_output[k] fired, and it is redrawn
    at every fired k whose target is not </s>."""
    task = tasks(multi30k_small_bin, "kn")
    oracle = m30k_oracles["target"]
    d = task.tgt_dict
    words = np.array(d.symbols, dtype=object)
    clean, noised, details = clean_and_noised(task)
    prev, target = field(clean, "prev_output_tokens"), field(clean, "target")
    prev_n, target_n = field(noised, "prev_output_tokens"), field(noised, "target")
    positions = np.arange(prev.shape[1])[None, :]  # position j inside each example
    fire, u_context, u_target = uniforms_of(
        SEED, EPOCH, clean["id"].numpy(), positions, TARGET_SIDE
    )
    gamma, _ = by_id(oracle, d.symbols, "kn", G0)
    with np.errstate(invalid="ignore"):  # padding: gamma NaN, never fires
        fired = fire < gamma[prev]  # which pairs fire, from the oracle's gamma alone

    for row in range(prev.shape[0]):
        n = int((prev[row] != d.pad()).sum())
        assert (prev[row, :n] != d.pad()).all() and prev[row, 0] == d.eos()  # right-padded
        xs, ys = list(words[prev[row, :n]]), list(words[target[row, :n]])
        expected_x, expected_y = oracle.noise(
            xs,
            ys,
            "kn",
            G0,
            list(words),
            lambda j, row=row: (fire[row, j], u_context[row, j], u_target[row, j]),
        )
        assert list(words[prev_n[row, :n]]) == expected_x, f"row {row}: contexts differ"
        assert list(words[target_n[row, :n]]) == expected_y, f"row {row}: targets differ"

    prev_changed, target_changed = prev_n != prev, target_n != target
    ordinary_target = (target != d.pad()) & (target != d.eos())
    # the pair is noised together: a target changes only where its context fired ...
    assert not (target_changed & ~fired).any()
    assert not (prev_changed & ~fired).any()
    # ... and is redrawn wherever its context fired, unless it is the structural </s>
    np.testing.assert_array_equal(details["target"].fired, fired)
    np.testing.assert_array_equal(details["target"].target_replaced, fired & ordinary_target)
    # where the target changed but the context did not, the context was redrawn to itself
    coincidences = target_changed & ~prev_changed
    assert coincidences.sum() <= 0.05 * fired.sum()
    # not vacuous: many pairs fired, many targets changed, and fired pairs whose target is </s>
    assert fired.sum() > 1500 and target_changed.sum() > 1000
    assert (fired & (target == d.eos())).sum() > 50


def test_source_is_noised_as_context_with_source_statistics(
    tasks, multi30k_small_bin, m30k_oracles
):
    """Source side, kn: token for token the authors' loop over the source sentence with the
    source sentences' gamma and q (its own random stream); only the context is noised."""
    task = tasks(multi30k_small_bin, "kn")
    oracle = m30k_oracles["source"]
    d = task.src_dict
    words = np.array(d.symbols, dtype=object)
    clean, noised, _ = clean_and_noised(task)
    src, src_n = field(clean, "src_tokens"), field(noised, "src_tokens")
    positions = np.arange(src.shape[1])[None, :]  # position j inside each example
    fire, u_context, u_target = uniforms_of(
        SEED, EPOCH, clean["id"].numpy(), positions, SOURCE_SIDE
    )
    fired = changed = 0
    for row in range(src.shape[0]):
        tokens = src[row][src[row] != d.pad()]  # left-padded: position j inside the sentence
        xs = list(words[tokens])
        expected, _ = oracle.noise(
            xs,
            xs,
            "kn",
            G0,
            list(words),
            lambda j, row=row: (fire[row, j], u_context[row, j], u_target[row, j]),
        )
        got = src_n[row][src[row] != d.pad()]
        assert list(words[got]) == expected, f"row {row}: source differs"
        fired += sum(fire[row, j] < oracle.gamma("kn", G0, w) for j, w in enumerate(xs))
        changed += sum(a != b for a, b in zip(xs, expected))
    assert fired > 1500 and changed > 1000


# ------------------------------------------------------------------------- structural symbols


@pytest.mark.parametrize("scheme", SCHEMES)
def test_eos_and_padding_are_never_noised_drawn_or_replaced(tasks, multi30k_small_bin, scheme):
    """</s> and padding sit where they sat in the clean batch on both sides (so they are
    neither noised, nor replaced as targets, nor drawn as replacements); <s> never appears;
    <blank> only as a noised context of the blank scheme."""
    gamma0 = 0.8
    task = tasks(multi30k_small_bin, scheme, gamma0)
    clean, noised, details = clean_and_noised(task)
    for key, d in (
        ("src_tokens", task.src_dict),
        ("prev_output_tokens", task.tgt_dict),
        ("target", task.tgt_dict),
    ):
        a, b = field(clean, key), field(noised, key)
        for symbol in (d.eos(), d.pad()):
            np.testing.assert_array_equal(b == symbol, a == symbol, err_msg=f"{key}, {d[symbol]}")
        assert not (b == d.bos()).any()
        blank = d.index("<blank>")
        assert (b == blank).any() == (scheme == "blank" and key != "target"), key
        if key != "target":
            assert (a != b).sum() > 1000, key  # contexts were noised
        else:  # only kn and mkn replace targets
            assert ((a != b).sum() > 500) == (scheme in ("kn", "mkn"))
    # not vacuous: many fired pairs have </s> as their target, which stays
    target = field(clean, "target")
    assert (details["target"].fired & (target == task.tgt_dict.eos())).sum() > 50
    for side, (d, s) in side_schemes(task).items():
        for symbol in SPECIAL:
            i = d.index(symbol)
            assert s.gamma[i] == 0 and (s.proposal is None or s.proposal[i] == 0), (side, symbol)
        assert d.unk() not in s.special_ids and s.gamma[d.unk()] > 0, side  # <unk> is a word


# -------------------------------------------------------------------- per-side gamma and q


@pytest.mark.parametrize("scheme", sorted(HAND["source"]))
def test_hand_corpus_shared_word_gets_each_sides_own_gamma_and_q(tasks, hand_mt, scheme):
    """``x`` and ``<unk>`` are spelled the same on both sides; each side uses its own counts
    (the values worked in this module's docstring), and the oracle agrees."""
    task = tasks(hand_mt, scheme)
    schemes = side_schemes(task)
    oracles = {
        "source": Oracle.from_sentences(w.split() for w in SOURCE),
        "target": Oracle.from_sentences(w.split() for w in TARGET),
    }
    # the shared word has different ids on the two sides (a sides mix-up cannot hide)
    assert task.src_dict.index("x") != task.tgt_dict.index("x")
    for side in ("source", "target"):
        d, s = schemes[side]
        for word, (gamma, q) in HAND[side][scheme].items():
            assert word in d.indices
            i = d.index(word)
            assert s.gamma[i] == pytest.approx(float(gamma), abs=1e-12), (side, word)
            assert oracles[side].gamma(scheme, G0, word) == pytest.approx(float(gamma), abs=1e-15)
            assert s.proposal[i] == pytest.approx(float(q), abs=1e-12), (side, word)
            assert oracles[side].proposal(scheme).get(word, 0.0) == pytest.approx(
                float(q), abs=1e-15
            )
    # spelled out for kn: x is noised with 1/2 in the source, 1/7 in the target
    if scheme == "kn":
        (sd, ss), (td, ts) = schemes["source"], schemes["target"]
        assert ss.gamma[sd.index("x")] == pytest.approx(0.5 * 3 / 3, abs=1e-12)
        assert ts.gamma[td.index("x")] == pytest.approx(0.5 * 2 / 7, abs=1e-12)
        assert ss.proposal[sd.index("x")] == 0  # x has no predecessor in the source
        assert ts.proposal[td.index("x")] == pytest.approx(3 / 5, abs=1e-12)


@pytest.mark.parametrize("corpus", ["hand", "multi30k"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_side_equals_the_oracle_of_its_own_sentences(tasks, request, corpus, scheme):
    """gamma and q of every id of each side's dictionary equal the oracle built from that side's
    sentences (to 1e-12); special symbols get 0, <unk> is an ordinary word."""
    if corpus == "hand":
        data = request.getfixturevalue("hand_mt")
        oracles = {
            "source": Oracle.from_sentences(w.split() for w in SOURCE),
            "target": Oracle.from_sentences(w.split() for w in TARGET),
        }
    else:
        data = request.getfixturevalue("multi30k_small_bin")
        oracles = request.getfixturevalue("m30k_oracles")
    task = tasks(data, scheme)
    for side, (d, s) in side_schemes(task).items():
        gamma, q = by_id(oracles[side], d.symbols, scheme, G0)
        seen = ~np.isnan(gamma)
        assert seen.sum() == len(oracles[side].unigram)  # every word of the side has an id
        np.testing.assert_allclose(s.gamma[seen], gamma[seen], rtol=0, atol=1e-12, err_msg=side)
        if scheme == "blank":
            assert s.proposal is None
        else:
            np.testing.assert_allclose(s.proposal, q, rtol=0, atol=1e-12, err_msg=side)
        for symbol in SPECIAL:
            i = d.index(symbol)
            assert s.gamma[i] == 0 and (s.proposal is None or s.proposal[i] == 0), (side, symbol)
        if corpus == "hand":  # <unk> occurs in the hand corpus: noised and drawn like any word
            assert s.gamma[d.unk()] > 0 and (scheme == "blank" or s.proposal[d.unk()] > 0)
