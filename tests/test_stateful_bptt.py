"""Stateful truncated BPTT: contiguous rows, hidden state carried across batches and reset per
epoch, ranks owning disjoint rows, and stateful evaluation beating block-by-block evaluation."""

import re

import numpy as np
import pytest
import torch
from conftest import COMMON, build_task, run_cli, stateful_lm_argv

from fairseq_noising.data.stateful_bptt_dataset import StatefulBPTTDataset


def test_row_r_of_batch_i_plus_one_continues_row_r_of_batch_i():
    stream = np.arange(1000) + 10
    dataset = StatefulBPTTDataset(stream, num_rows=4, row_ids=np.arange(4), block_size=7)
    row_length = (1000 - 1) // 4
    batches = [dataset.collater([dataset[i]]) for i in range(len(dataset))]
    contexts = torch.cat([b["net_input"]["src_tokens"] for b in batches], dim=1)
    targets = torch.cat([b["target"] for b in batches], dim=1)
    for r in range(4):
        row = stream[r * row_length : (r + 1) * row_length + 1]
        np.testing.assert_array_equal(contexts[r].numpy(), row[:-1])
        np.testing.assert_array_equal(targets[r].numpy(), row[1:])
    assert batches[-1]["net_input"]["src_tokens"].size(1) == row_length - 7 * (len(dataset) - 1)
    assert all(
        b["target"].is_contiguous() and b["net_input"]["src_tokens"].is_contiguous()
        for b in batches
    )
    ids = torch.cat([b["id"] for b in batches])
    assert ids.unique().numel() == ids.numel(), "example ids must be unique (they key the noise)"


def test_two_ranks_own_disjoint_rows_that_cover_the_stream():
    stream = np.arange(500)
    ranks = [StatefulBPTTDataset(stream, 6, np.arange(3 * k, 3 * k + 3), 5) for k in (0, 1)]
    whole = StatefulBPTTDataset(stream, 6, np.arange(6), 5)
    np.testing.assert_array_equal(
        torch.cat([r.contexts for r in ranks]).numpy(), whole.contexts.numpy()
    )
    for i in range(len(whole)):
        ids = [set(r.collater([r[i]])["id"].tolist()) for r in ranks]
        assert not ids[0] & ids[1]
        assert ids[0] | ids[1] == set(whole.collater([whole[i]])["id"].tolist())


def stateful_argv(data, *extra, **options):
    """These tests' command line: stateful BPTT over 5 rows with the 16-unit small model
    (conftest's stateful_lm_argv) and KN noising at gamma 0.3, unless ``options``
    (lm_train_argv's) say otherwise."""
    return stateful_lm_argv(data, *extra, **{"scheme": "kn", "gamma": 0.3, **options})


class BackwardOnly:
    """What fairseq's train_step asks of an optimizer: backward()."""

    def backward(self, loss):
        loss.backward()


@pytest.mark.slow
def test_task_carries_detached_state_and_resets_it_each_epoch(ptb_small_bin):
    task, cfg = build_task(stateful_argv(ptb_small_bin))
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    optimizer = BackwardOnly()
    iterator = task.get_batch_iterator(task.dataset("train"), epoch=1).next_epoch_itr(shuffle=False)
    batches = [next(iterator) for _ in range(3)]
    rows = [b["net_input"]["src_tokens"] for b in batches]
    assert all(r.shape == (5, 35) for r in rows)

    task.begin_epoch(1, model)
    seen = []
    hook = model.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("initial_state")), with_kwargs=True
    )
    finals = []
    for b in batches:
        task.train_step(b, model, criterion, optimizer, 0)
        finals.append(task.carrier.states["train"])
    assert seen[0] is None
    for previous, given in zip(finals, seen[1:]):
        assert given is not None and all(torch.equal(p, g) for p, g in zip(previous, given))
        assert not any(g.requires_grad for g in given)
    task.begin_epoch(2, model)
    seen.clear()
    task.train_step(batches[0], model, criterion, optimizer, 0)
    assert seen == [None], "the state must be reset at the start of an epoch"
    hook.remove()


@pytest.mark.slow
def test_carried_state_equals_one_long_forward(ptb_small_bin):
    task, cfg = build_task(stateful_argv(ptb_small_bin, scheme="none"))
    task.load_dataset("valid")
    model = task.build_model(cfg.model).eval()
    task.begin_valid_epoch(1, model)
    iterator = task.get_batch_iterator(task.dataset("valid")).next_epoch_itr(shuffle=False)
    b1, b2 = next(iterator), next(iterator)
    with torch.no_grad():
        out1 = model(**task.carrier.inject(b1, "eval")["net_input"])[0]
        out2 = model(**task.carrier.inject(b2, "eval")["net_input"])[0]
        whole = model(torch.cat([b1["net_input"]["src_tokens"], b2["net_input"]["src_tokens"]], 1))[
            0
        ]
    torch.testing.assert_close(torch.cat([out1, out2], 1), whole, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_stateful_rows_follow_the_rank(ptb_small_bin, monkeypatch):
    from fairseq.distributed import utils as distributed_utils

    datasets = []
    for rank in (0, 1):
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
        monkeypatch.setattr(distributed_utils, "get_data_parallel_rank", lambda r=rank: r)
        monkeypatch.setattr(distributed_utils, "get_data_parallel_world_size", lambda: 2)
        task, _ = build_task(stateful_argv(ptb_small_bin))
        task.load_dataset("train")
        datasets.append(task.dataset("train").dataset)
    assert datasets[0].num_rows == datasets[1].num_rows == 10
    assert set(datasets[0].row_ids.tolist()) == set(range(5))
    assert set(datasets[1].row_ids.tolist()) == set(range(5, 10))


def perplexity(output):
    found = re.findall(r"Perplexity: ([0-9.]+)", output)
    assert found, output[-2000:]
    return float(found[-1])


@pytest.mark.slow
def test_stateful_evaluation_beats_block_by_block_on_one_checkpoint(ptb_small_bin, tmp_path):
    save = tmp_path / "ckpt"
    model = ["--arch", "noising_lstm_lm_small", "--hidden-size", 64]
    train = ["--batch-size", 20, "--sentence-avg", "--max-epoch", 2, "--disable-validation"]
    train += ["--save-dir", save, "--no-epoch-checkpoints"]
    run_cli(["fairseq-train", *stateful_argv(ptb_small_bin, *train, model=model, lr=1.0)])
    evaluate = ["fairseq-eval-lm", ptb_small_bin, *COMMON, "--task", "noised_language_modeling"]
    evaluate += ["--path", save / "checkpoint_last.pt", "--gen-subset", "valid"]
    evaluate += ["--tokens-per-sample", 35]
    stateful = run_cli(evaluate + ["--stateful-bptt", "--batch-size", "1"])
    stateless = run_cli(evaluate + ["--batch-size", "20"])
    ppl_stateful = perplexity(stateful.stderr + stateful.stdout)
    ppl_stateless = perplexity(stateless.stderr + stateless.stdout)
    assert ppl_stateful < ppl_stateless, (ppl_stateful, ppl_stateless)
