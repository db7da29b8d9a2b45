"""Independent scorers of what fairseq's evaluation commands print, for the tests that run them:
the perplexity of a language-model checkpoint on a split, computed here with plain torch from the
split's token stream (in fairseq-eval-lm's blocks, or with every token's whole left context as
``--stateful-bptt --batch-size 1`` reads it), and the BLEU of fairseq-generate's own hypotheses
and references, computed by sacrebleu called directly.

The model is the checkpoint's, loaded as fairseq loads it; what is checked is the scoring: which
tokens are scored, from which context, and how the losses are averaged.
"""

import math
import re

import torch


def load_checkpoint(checkpoint, data):
    """(models, task) of a checkpoint as fairseq's evaluation commands load it: the task rebuilt
    from the checkpoint's own config (``load_model_ensemble_and_task``), reading the binarized
    folder ``data``."""
    from fairseq import checkpoint_utils

    import fairseq_noising.models  # noqa: F401  (registers the plugin's models and tasks)
    import fairseq_noising.tasks  # noqa: F401

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)}
    )
    return models, task


def load_lm(checkpoint, data):
    """(model in eval mode, the split -> token stream function) of a language-model checkpoint
    trained on the binarized folder ``data``: the stream is the split as fairseq stored it (every
    line followed by </s>), as one 1-D tensor."""
    from fairseq.data import data_utils

    models, task = load_checkpoint(checkpoint, data)

    def stream(split):
        dataset = data_utils.load_indexed_dataset(f"{data}/{split}", task.source_dictionary)
        return torch.cat([dataset[i] for i in range(len(dataset))]).long()

    return models[0].eval(), stream


def _nll(model, inputs, targets):
    """Summed negative log-likelihood (nats) of ``targets`` [1, T] after ``inputs`` [1, T], from a
    zero state."""
    with torch.no_grad():
        out = model(inputs)
        lprobs = model.get_normalized_probs(out, log_probs=True).float()
    return -lprobs.gather(-1, targets.unsqueeze(-1)).sum().item()


def block_perplexity(checkpoint, data, split, tokens_per_sample):
    """fairseq-eval-lm's perplexity without --stateful-bptt (fairseq's language_modeling with
    --sample-break-mode none): the split's stream cut into blocks of ``tokens_per_sample``
    tokens, every token scored once from a zero state at its block's start, the block read after
    the token before it (</s> before the first block)."""
    model, stream_of = load_lm(checkpoint, data)
    stream = stream_of(split)
    eos = stream.new_tensor([model.decoder.dictionary.eos()])
    total = 0.0
    for start in range(0, stream.numel(), tokens_per_sample):
        targets = stream[start : start + tokens_per_sample]
        before = eos if start == 0 else stream[start - 1 : start]
        inputs = torch.cat([before, targets[:-1]])
        total += _nll(model, inputs[None], targets[None])
    return math.exp(total / stream.numel())


def stateful_perplexity(checkpoint, data, split):
    """``fairseq-eval-lm --stateful-bptt --batch-size 1``'s perplexity: every token of the split's
    stream but the first, predicted from its whole left context (one row, from a zero state)."""
    model, stream_of = load_lm(checkpoint, data)
    stream = stream_of(split)
    return math.exp(_nll(model, stream[None, :-1], stream[None, 1:]) / (stream.numel() - 1))


def printed_perplexity(output):
    """The perplexity of fairseq-eval-lm's last "Perplexity: X" line."""
    found = re.findall(r"Perplexity: ([0-9.]+)", output)
    assert found, f"no perplexity in fairseq-eval-lm's output:\n{output[-3000:]}"
    return float(found[-1])


def generate_bleu(output, subset, beam):
    """(what fairseq-generate --scoring sacrebleu printed after "BLEU = ", sacrebleu's own
    formatted BLEU of the D- hypotheses against the T- references that it printed, one pair per
    sentence id) -- both strings, equal when fairseq scored exactly its outputs."""
    import sacrebleu

    printed = re.findall(rf"Generate {subset} with beam={beam}: (BLEU = .*)$", output, re.M)
    assert len(printed) == 1, f"no BLEU line in fairseq-generate's output:\n{output[-3000:]}"
    refs = dict(re.findall(r"^T-(\d+)\t(.*)$", output, re.M))
    hyps = {i: text for i, _, text in re.findall(r"^D-(\d+)\t(\S+)\t(.*)$", output, re.M)}
    assert refs and sorted(refs) == sorted(hyps), "a T- line without its D- line, or the reverse"
    ids = sorted(refs, key=int)
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs[i] for i in ids]])
    return printed[0].strip(), bleu.format()
