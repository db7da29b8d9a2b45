"""The three networks of ``bench_training --mode models`` and their training step: the paper's
LSTM language model, fairseq's ``lstm_lm`` of the same sizes, and the same network in plain PyTorch.
"""

from argparse import Namespace

from ._common import BPTT, ptb_batches


def build_network(kind, dictionary, hidden, args, device):
    import torch.nn as nn
    from fairseq.models import build_model

    import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the plugin's models)

    task = Namespace(dictionary=dictionary, source_dictionary=dictionary)
    task.target_dictionary, dropout = dictionary, args.dropout
    if kind == "noising":
        cfg = dict(hidden_size=hidden, num_layers=2, dropout=dropout)
        return build_model(Namespace(arch="noising_lstm_lm_medium", **cfg), task).to(device)
    if kind == "stock":
        cfg = dict(decoder_embed_dim=hidden, decoder_hidden_size=hidden, decoder_layers=2)
        cfg.update(decoder_out_embed_dim=hidden, criterion="cross_entropy", dropout=dropout)
        cfg.update(tokens_per_sample=BPTT, max_target_positions=None)
        return build_model(Namespace(arch="lstm_lm", **cfg), task).to(device)
    plain = nn.ModuleDict(  # plain: dropout after the embedding and after the LSTM
        dict(
            embed=nn.Embedding(len(dictionary), hidden),
            lstm=nn.LSTM(hidden, hidden, 2, dropout=dropout),
            out=nn.Linear(hidden, len(dictionary)),
            drop=nn.Dropout(dropout),
        )
    )
    for p in plain.parameters():
        nn.init.uniform_(p, -0.1, 0.1)
    return plain.to(device)


def training_step(kind, model, ids, args, device):
    """A step of forward, cross entropy, backward and SGD on the next of ``ptb_batches``; the LSTM
    state carried, except by stock."""
    import torch
    import torch.nn.functional as F

    batches = ptb_batches(ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    carried = [None]

    def step():
        x, y = (t.to(device) for t in batches[step.count % len(batches)])
        if kind == "noising":
            logits, extra = model(x, initial_state=carried[0])
            carried[0] = tuple(s.detach() for s in extra["final_state"])
        elif kind == "stock":
            logits, _ = model(x)
        else:
            h, state = model.lstm(model.drop(model.embed(x.t())), carried[0])
            logits = model.out(model.drop(h).transpose(0, 1))
            carried[0] = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        step.count, step.loss = step.count + 1, loss.detach()

    step.count = 0
    return step
