"""An oracle for the noising schemes that shares no code with ``fairseq_noising``.

It follows the authors' per-word procedure (stanfordmlgroup/nlm-noising: ``loader.py``
``_read_tokens``, ``_build_vocab`` and ``noise_batch``; ``utils.py`` ``build_continuations`` and
``estimate_modkn_discounts``): plain dictionaries of counts built from the raw text, gamma and q
per word, and a per-token noising loop. Words are strings; nothing here knows fairseq's ids.

Where the authors' code is undefined (a context with no successor divides by zero, a corpus
without bigrams seen three times divides by zero in D3+) the oracle does what the plugin
documents: gamma_0 for a word without successors; such corpora are not used in the tests.

``special`` words (``</s>`` in translation or with ``--special-eos``) are never noised, never
drawn and never replaced as targets; the authors' language model has none.
"""

import bisect
from collections import Counter, defaultdict

EOS = "<eos>"  # what the authors' reader makes of a line break


def read_ptb_words(path):
    """The authors' ``_read_tokens`` for PTB: every line break becomes the word ``<eos>``."""
    with open(path, encoding="utf-8") as f:
        return f.read().replace("\n", f" {EOS} ").split()


class Oracle:
    """gamma(w) and q(w) of every scheme for a stream (``words``) or for sentences."""

    def __init__(self, bigrams, unigram, first_word=None, special=()):
        self.special = set(special)
        self.unigram = Counter(unigram)
        self.bigrams = Counter(bigrams)
        # utils.build_continuations: per context, total and distinct continuations
        self.total, self.distinct = defaultdict(int), defaultdict(int)
        histories = defaultdict(set)
        for (a, b), count in self.bigrams.items():
            self.total[a] += count
            self.distinct[a] += 1
            histories[b].add(a)
        self.histories = {w: len(h) for w, h in histories.items()}
        if first_word is not None and first_word not in self.histories:
            self.histories[first_word] = 1  # loader._build_vocab's "edge case"
        # utils.estimate_modkn_discounts
        n = Counter(self.bigrams.values())
        y = n[1] / (n[1] + 2 * n[2])
        self.d1 = 1 - 2 * y * n[2] / n[1]
        self.d2 = 2 - 3 * y * n[3] / n[2]
        self.d3p = 3 - 4 * y * n[4] / n[3]
        self.n1, self.n2, self.n3p = Counter(), Counter(), Counter()
        for (a, _), count in self.bigrams.items():
            (self.n1 if count == 1 else self.n2 if count == 2 else self.n3p)[a] += 1

    @classmethod
    def from_stream(cls, words, special=()):
        """Language modeling: one stream, bigrams across line ends (``loader.py``)."""
        return cls(zip(words[:-1], words[1:]), words, first_word=words[0], special=special)

    @classmethod
    def from_sentences(cls, sentences, eos="</s>"):
        """Translation: each sentence followed by ``eos``, bigrams inside a sentence only;
        ``eos`` is special."""
        bigrams, unigram = [], []
        for words in sentences:
            words = list(words) + [eos]
            unigram += words
            bigrams += zip(words[:-1], words[1:])
        return cls(bigrams, unigram, special=(eos,))

    def vocabulary(self):
        return sorted(self.unigram)

    def gamma(self, scheme, gamma0, word):
        """The probability that context ``word`` is noised (``noise_batch``'s ``p``)."""
        if scheme == "none" or word in self.special:
            return 0.0
        if scheme in ("blank", "uniform", "unigram"):
            return gamma0
        total = self.total.get(word, 0)
        if total == 0:
            return gamma0
        if scheme in ("ad", "kn"):
            p = (gamma0 / total) * self.distinct[word]
        elif scheme == "mkn":
            mass = self.d1 * self.n1[word] + self.d2 * self.n2[word] + self.d3p * self.n3p[word]
            p = gamma0 * mass / float(total)
        else:
            raise KeyError(f"the oracle has no gamma for scheme {scheme!r}: write its formula here")
        return min(p, 1.0)

    def proposal(self, scheme):
        """q as a dict word -> probability (None for blank)."""
        if scheme == "blank":
            return None
        if scheme == "uniform":
            weights = {w: 1.0 for w in self.unigram}
        elif scheme in ("unigram", "ad"):
            weights = dict(self.unigram)  # loader: frequencies
        elif scheme in ("kn", "mkn"):  # loader: hist_freqs, distinct histories
            weights = dict(self.histories)
        else:
            raise KeyError(f"the oracle has no q for scheme {scheme!r}: write its formula here")
        weights = {w: c for w, c in weights.items() if w not in self.special}
        total = float(sum(weights.values()))
        return {w: c / total for w, c in weights.items()}

    def noise(self, x, y, scheme, gamma0, order, uniforms, blank="<blank>"):
        """``noise_batch`` on word sequences ``x`` (contexts) and ``y`` (targets).

        ``order`` lists the words in the order their q cumulates (the authors': their vocabulary
        order). ``uniforms(j)`` returns three numbers in [0, 1) for position j: the noising draw,
        the context replacement, the target replacement (the authors' ``np.random`` calls).
        """
        q = self.proposal(scheme)
        cumsum, running = [], 0.0
        for w in order:
            running += q.get(w, 0.0) if q is not None else 0.0
            cumsum.append(running)

        def sample(u):  # loader.sample_index
            return order[min(bisect.bisect(cumsum, u * cumsum[-1]), len(order) - 1)]

        x_, y_ = list(x), list(y)
        for j, word in enumerate(x):
            fire, u_context, u_target = uniforms(j)
            if not fire < self.gamma(scheme, gamma0, word):
                continue
            if scheme == "blank":
                x_[j] = blank
                continue
            x_[j] = sample(u_context)
            if scheme in ("kn", "mkn") and y[j] not in self.special:
                y_[j] = sample(u_target)
        return x_, y_


def by_id(oracle, symbols, scheme, gamma0, rename=None):
    """The oracle's gamma and q as arrays over a fairseq dictionary's ``symbols`` (ids), for
    comparisons with arrays; ``rename`` maps a symbol to the oracle's word (``</s>`` to
    ``<eos>``). Symbols the oracle never saw (``<s>``, padding, fairseq's filler
    symbols) get gamma NaN (undefined: they never occur as a context) and q 0."""
    import numpy as np

    rename = rename or {}
    q = oracle.proposal(scheme) or {}
    known = set(oracle.unigram)
    words = [rename.get(s, s) for s in symbols]
    gamma = np.array([oracle.gamma(scheme, gamma0, w) if w in known else np.nan for w in words])
    proposal = np.array([q.get(w, 0.0) for w in words])
    return gamma, proposal
