"""Source reversal (Sutskever et al., 2014) for the encoder-decoder: the order in which the encoder
reads each row's tokens. See ``docs/models.md`` ("Source reversal")."""

from typing import Optional, Tuple

import torch
from torch import Tensor


def reading_order(
    src_tokens: Tensor, padding_idx: int, eos_idx: Optional[int], reverse: bool
) -> Tuple[Tensor, Tensor]:
    """For each source position, the time step at which the encoder reads it.

    Returns ``(order, lengths)``: ``order`` (B, S) is, per row, a permutation of ``0..S-1`` mapping
    position j to its reading step (real tokens first, in reading order, then the pads), and
    ``lengths`` (B,) the number of real tokens. Real tokens of a row must be contiguous (left or
    right padding). With ``reverse`` the real tokens are read backwards, except a trailing
    ``eos_idx`` which is still read last.
    """
    real = src_tokens.ne(padding_idx)
    lengths = real.long().sum(dim=1)
    rank = real.long().cumsum(dim=1) - 1  # rank among the real tokens (valid where real)
    pad_rank = (~real).long().cumsum(dim=1) - 1
    if reverse:
        last_pos = (real.long().cumsum(dim=1) == lengths.unsqueeze(1)) & real
        if eos_idx is not None:
            ends_with_eos = (src_tokens.eq(eos_idx) & last_pos).any(dim=1)
            n_rev = lengths - ends_with_eos.long()
        else:
            n_rev = lengths
        n_rev = n_rev.unsqueeze(1)
        rank = torch.where(rank < n_rev, n_rev - 1 - rank, rank)
    order = torch.where(real, rank, lengths.unsqueeze(1) + pad_rank)
    return order, lengths


def reverse_source_tokens(src_tokens: Tensor, padding_idx: int, eos_idx: Optional[int]) -> Tensor:
    """The source as the encoder reads it with ``--reverse-source``, in the original padding
    layout: real tokens reversed (a trailing eos kept last), pads untouched."""
    order, _ = reading_order(src_tokens, padding_idx, eos_idx, reverse=False)
    rev_order, _ = reading_order(src_tokens, padding_idx, eos_idx, reverse=True)
    # token at position j goes to the position whose unreversed reading step is rev_order[j]
    pos_of_step = torch.empty_like(order).scatter_(
        1, order, torch.arange(order.size(1), device=order.device).expand_as(order).contiguous()
    )
    target_pos = pos_of_step.gather(1, rev_order)
    return torch.empty_like(src_tokens).scatter_(1, target_pos, src_tokens)
