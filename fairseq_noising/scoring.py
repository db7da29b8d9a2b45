"""A checkpoint of the plugin loaded for evaluation, and a split's targets scored with it: the one
path of ``fairseq-noise-eval`` (:mod:`.sweep.evaluate`) and ``fairseq-noise-analyze``
(:mod:`.cli.model_io`)."""

import torch
from fairseq import checkpoint_utils

import fairseq_noising.models  # noqa: F401  (registers the models and the checkpoint allow-list)
import fairseq_noising.tasks  # noqa: F401  (registers the tasks)


def load_model(path: str, task=None, state=None):
    """(model in eval mode, its config, its task) of the checkpoint at ``path``, read by fairseq
    with torch's safe loader (``state``: the checkpoint already read, with its overrides, by
    ``checkpoint_utils.load_checkpoint_to_cpu``). The task is the checkpoint's own unless
    ``task`` is given (one set up from a command line, as ``fairseq-generate`` sets it up)."""
    if task is None:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    else:
        models, cfg = checkpoint_utils.load_model_ensemble([path], task=task, state=state)
    return models[0].eval(), cfg, task


@torch.no_grad()
def log_probs(model, net_input: dict, **kwargs):
    """The model's log-probabilities [B, T, V] in fp32 over ``net_input`` (``kwargs``: more of
    the forward's arguments, such as a stateful decoder's initial state), and its output."""
    net_output = model(**net_input, **kwargs)
    return model.get_normalized_probs(net_output, log_probs=True).float(), net_output


def target_log_probs(lprobs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position [B, T] from ``lprobs`` [B, T, V]."""
    return lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def summed_nll(lprobs: torch.Tensor, target: torch.Tensor, keep: torch.Tensor):
    """(sum of -log p over the positions ``keep`` marks, in float64, and their number)."""
    return -float(target_log_probs(lprobs, target)[keep].double().sum()), int(keep.sum())
