"""KL divergences of predicted distributions and perplexities (torch, no fairseq).

The comparison runs over the real vocabulary R (the types seen in training), the model's softmax
renormalised on R and the mass outside R reported beside it: docs/analysis.md, ``kl``.
"""

import math
from typing import Tuple

import numpy as np
import torch


def real_vocabulary(unigram_counts) -> np.ndarray:
    """Boolean mask of the types seen in training (count > 0)."""
    counts = np.asarray(unigram_counts)
    mask = counts > 0
    if not mask.any():
        raise ValueError("the training statistics hold no token")
    return mask


def reference_log_probs(unigram_counts, support: np.ndarray):
    """log u and log q over the support (float64 arrays of length |R|)."""
    counts = np.asarray(unigram_counts, dtype=np.float64)[support]
    size = int(support.sum())
    log_uniform = np.full(size, -math.log(size))
    log_unigram = np.log(counts) - math.log(counts.sum())
    return log_uniform, log_unigram


def kl_on_support(
    log_p: torch.Tensor, support: torch.Tensor, log_q: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """D(p_R || q) per row and the mass of p outside the support.

    ``log_p`` [N, V] holds log-probabilities over the full dictionary, ``support`` a bool [V] or
    index [|R|] tensor, ``log_q`` [|R|] the reference log-probabilities on the support (q > 0).
    Returns (kl [N], outside_mass [N]), computed in float64.
    """
    log_p = log_p.double()
    restricted = log_p[:, support]
    log_mass = torch.logsumexp(restricted, dim=-1, keepdim=True)
    log_p_r = restricted - log_mass
    p_r = log_p_r.exp()
    # 0 log 0 = 0: where p_R underflows to 0 the term vanishes
    terms = torch.where(
        p_r > 0, p_r * (log_p_r - log_q.double().to(log_p.device)), torch.zeros_like(p_r)
    )
    return terms.sum(-1), (-log_mass.squeeze(-1).exp()).add(1.0).clamp_min(0.0)


def log_mean_exp(log_values: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """log (1/K sum_k exp(x_k)) along ``dim``: the Monte Carlo average of probabilities."""
    k = log_values.size(dim)
    return torch.logsumexp(log_values, dim=dim) - math.log(k)


def perplexity(total_nll: float, count: int) -> float:
    """exp(mean negative log-likelihood in nats); nan for an empty set of positions."""
    if count <= 0:
        return float("nan")
    return float(math.exp(total_nll / count))
