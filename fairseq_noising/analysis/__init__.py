"""The math behind ``fairseq-noise-analyze`` (numpy/torch only, no fairseq).

- :mod:`.divergence`: KL divergence of predicted distributions from the uniform and unigram
  distributions (Figure 3 of Xie et al., 2017), perplexities, Monte Carlo averaging.
- :mod:`.ngrams`: which evaluation positions hold a bigram or trigram never seen in training
  (Table 6).
- :mod:`.pseudocounts`: exact expected bigram pseudocounts of noised data (Section 3.3).
- :mod:`.logs`: parsing fairseq training logs (Figures 1 and 2).
- :mod:`.plots`: the figures (matplotlib, Agg backend).
"""
