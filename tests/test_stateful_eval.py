"""Stateful evaluation (``--stateful-bptt``): every token of a split is scored exactly once,
whatever the number of rows, and the carried LSTM state starts from zero for each subset of
``--valid-subset valid,test``.

The first token of a split's stream is never scored: like the authors' code (and Zaremba et al.'s
reader: x = data[i:i+T], y = data[i+1:i+T+1]), the plugin predicts tokens 1..N-1 of the stream
(every line followed by ``</s>``) from their left context, and token 0 is only ever context
(stock fairseq ``language_modeling`` instead prepends a ``</s>`` and scores all N). So a split of
N tokens is N - 1 scored tokens, for every number of rows (--batch-size-valid in fairseq-train,
--batch-size in fairseq-eval-lm): when N - 1 is not a multiple of the rows, the end of the stream
is padded (pad targets are not scored), never dropped. The expected N is counted from the raw
text (words + one ``</s>`` per line) and checked against the binarized split read with
fairseq's own ``load_indexed_dataset``.

Data: the first 300/20/7 lines of PTB train/valid/test (valid: N = 471, test: N = 170, so
N - 1 is divisible by neither 3 nor 7), a 16-unit model trained for one epoch by the real
``fairseq-train``.
"""

import json
import re
import types

import numpy as np
import pytest
import torch
from conftest import COMMON, PTB_SLICES, build_task, run_cli, stateful_lm_argv
from fairseq import checkpoint_utils
from fairseq.data import Dictionary, data_utils

from fairseq_noising.data.stateful_bptt_dataset import StatefulBPTTDataset

# one pytest-xdist worker: the module's fixtures (trained checkpoints) are built once
pytestmark = pytest.mark.xdist_group("stateful_eval")

LINES = PTB_SLICES["tiny"]


@pytest.fixture(scope="module")
def tiny(ptb_tiny_bin):
    """{"raw": folder of the text splits, "bin": fairseq-preprocess output}."""
    return {"raw": ptb_tiny_bin.parent / "raw", "bin": ptb_tiny_bin}


def stream_of(tiny, split):
    """The split as one token stream, counted independently of the plugin: the raw text's words
    (and one </s> per line) looked up in the dictionary, checked against the binarized split as
    fairseq reads it."""
    dictionary = Dictionary.load(str(tiny["bin"] / "dict.txt"))
    with open(tiny["raw"] / f"ptb.{split}.txt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    expected = [dictionary.index(w) for line in lines for w in line.split() + ["</s>"]]
    binarized = data_utils.load_indexed_dataset(str(tiny["bin"] / split), dictionary)
    stream = torch.cat([binarized[i] for i in range(len(binarized))]).long()
    assert stream.tolist() == expected
    assert len(lines) == LINES[split]
    return stream


def checkpoint_argv(data, *extra):
    """The training run's command line (the Trainer of these tests is rebuilt from it): stateful
    BPTT over 5 rows with the 16-unit small model (conftest's stateful_lm_argv), no noise, the
    paper's SGD, seed 1."""
    return stateful_lm_argv(data, "--seed", 1, *extra, scheme="none", lr=1.0)


@pytest.fixture(scope="module")
def checkpoint(tiny, tmp_path_factory):
    save = tmp_path_factory.mktemp("stateful_eval_ckpt")
    run_cli(
        [
            "fairseq-train",
            *checkpoint_argv(tiny["bin"]),
            "--max-epoch",
            1,
            "--valid-subset",
            "valid,test",
            "--batch-size-valid",
            3,
            "--log-format",
            "json",
            "--save-dir",
            save,
            "--no-epoch-checkpoints",
        ]
    )
    return save / "checkpoint_last.pt"


def build_trainer(tiny, checkpoint, *extra):
    """fairseq-train's Trainer, in-process, with the checkpoint's weights."""
    from fairseq.trainer import Trainer

    task, cfg = build_task(checkpoint_argv(tiny["bin"], *extra))
    for split in ("valid", "test"):
        task.load_dataset(split)
    model = task.build_model(cfg.model)
    model.load_state_dict(checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["model"])
    return Trainer(cfg, task, model, task.build_criterion(cfg.criterion)), task, cfg


def valid_batches(trainer, subset):
    """The batches of one subset, made as fairseq_cli.train.validate makes them."""
    return trainer.get_valid_iterator(subset).next_epoch_itr(shuffle=False, set_dataset_epoch=False)


# ------------------------------------------------------------------------- every token once
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 20])
def test_evaluation_dataset_targets_every_token_but_the_first_exactly_once(rows):
    pad = 1
    for size in list(range(2, 60)) + [471]:
        stream = torch.arange(size) + 4
        dataset = StatefulBPTTDataset(stream.numpy(), rows, np.arange(rows), 5, pad=pad)
        batches = [dataset.collater([dataset[i]]) for i in range(len(dataset))]
        targets = torch.cat([b["target"] for b in batches], dim=1).flatten()
        assert targets[targets.ne(pad)].tolist() == stream[1:].tolist(), (size, rows)
        assert sum(b["ntokens"] for b in batches) == size - 1
        # padding only ever ends a row: no real token follows a pad in the same row
        grid = torch.cat([b["target"] for b in batches], dim=1)
        assert all(row[row.eq(pad).cumsum(0).gt(0)].eq(pad).all() for row in grid)


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 3, 7])
def test_validation_scores_every_token_but_the_first_exactly_once(tiny, checkpoint, rows):
    trainer, task, _ = build_trainer(tiny, checkpoint, "--batch-size-valid", rows)
    pad = task.dictionary.pad()
    for subset in ("valid", "test"):
        stream = stream_of(tiny, subset)
        targets, ntokens, sample_size = [], 0, 0
        task.begin_valid_epoch(1, trainer.model)
        with torch.no_grad():
            for sample in valid_batches(trainer, subset):
                assert sample["target"].size(0) == rows
                _, size, log = task.valid_step(sample, trainer.model.eval(), trainer.criterion)
                targets.append(sample["target"])
                ntokens += log["ntokens"]
                sample_size += size
        # row r of every batch continues row r of the previous batch: read row by row, the
        # scored (non-pad) targets must be the stream from its second token, each exactly once
        scored = torch.cat(targets, dim=1).flatten()
        scored = scored[scored.ne(pad)]
        assert scored.tolist() == stream[1:].tolist(), (subset, rows, scored.numel())
        # what the loss is summed over and divided by (cross_entropy: sample_size = ntokens)
        assert ntokens == sample_size == stream.numel() - 1, (subset, rows)


def eval_lm(tiny, checkpoint, rows, subset="valid"):
    return run_cli(
        [
            "fairseq-eval-lm",
            tiny["bin"],
            *COMMON,
            "--task",
            "noised_language_modeling",
            "--path",
            checkpoint,
            "--gen-subset",
            subset,
            "--stateful-bptt",
            "--batch-size",
            rows,
            "--tokens-per-sample",
            35,
            "--output-word-probs",
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 3])
def test_eval_lm_scores_every_token_but_the_first_exactly_once(tiny, checkpoint, rows):
    proc = eval_lm(tiny, checkpoint, rows)
    log = proc.stdout + proc.stderr
    stream = stream_of(tiny, "valid")
    evaluated = re.findall(r"Evaluated ([\d,]+) tokens", log)
    assert evaluated and int(evaluated[-1].replace(",", "")) == stream.numel() - 1, log[-2000:]
    # --output-word-probs: one line per (block, row) example, id = block * rows + row, listing
    # the words it scored; read row by row they must be the stream from its second token
    scored = {}
    for example_id, words in re.findall(r"fairseq_cli\.eval_lm:(\d+) (.*)", log):
        scored[int(example_id)] = re.findall(r"(\S+) \[-?[\d.]+\]", words)
    order = sorted(scored, key=lambda i: (i % rows, i // rows))
    words = [w for i in order for w in scored[i]]
    dictionary = Dictionary.load(str(tiny["bin"] / "dict.txt"))
    assert len(words) == stream.numel() - 1
    assert words == [dictionary[t] for t in stream[1:].tolist()]


# ------------------------------------------------------------------------- reset per subset
@pytest.mark.slow
def test_each_valid_subset_starts_from_a_zero_state(tiny, checkpoint, monkeypatch):
    """fairseq_cli.train.validate calls task.begin_valid_epoch once, then validates each of
    --valid-subset valid,test in turn: the test loss must be the one test gives alone."""
    from fairseq_cli.train import validate

    trainer, task, cfg = build_trainer(
        tiny, checkpoint, "--batch-size-valid", 3, "--log-format", "json"
    )
    recorded = []
    valid_step = task.valid_step

    def recording_valid_step(sample, model, criterion):
        loss, sample_size, log = valid_step(sample, model, criterion)
        recorded.append((float(loss), sample_size))
        return loss, sample_size, log

    monkeypatch.setattr(task, "valid_step", recording_valid_step)

    def per_batch(subsets):
        recorded.clear()
        validate(cfg, trainer, task, types.SimpleNamespace(epoch=1), subsets)
        return list(recorded)

    both, test, valid = per_batch(["valid", "test"]), per_batch(["test"]), per_batch(["valid"])
    assert len(both) == len(valid) + len(test)
    assert both[: len(valid)] == valid
    # the same batches from the same zero state: equal up to float rounding (in fact bit-equal)
    assert [s for _, s in both[len(valid) :]] == [s for _, s in test]
    torch.testing.assert_close(
        [l for l, _ in both[len(valid) :]], [l for l, _ in test], rtol=1e-6, atol=0.0
    )

    # not vacuous: starting test from the state that valid leaves changes the test loss
    left_by_valid = task.carrier.states["eval"]
    assert left_by_valid is not None
    batches = valid_batches(trainer, "test")
    task.carrier.states["eval"] = left_by_valid
    recorded.clear()
    with torch.no_grad():
        for sample in batches:
            task.valid_step(sample, trainer.model.eval(), trainer.criterion)
    carried = sum(l for l, _ in recorded)
    alone = sum(l for l, _ in test)
    assert abs(carried - alone) > 1e-3 * alone, (carried, alone)


def validate_cli(tiny, checkpoint, subsets):
    """fairseq-validate's per-subset stats. Its task settings come from the checkpoint, so the
    rows are the training run's --batch-size-valid 3 (its own --batch-size is required but does
    not change them)."""
    proc = run_cli(
        [
            "fairseq-validate",
            tiny["bin"],
            *COMMON,
            "--log-format",  # one JSON object of stats per subset, in place of COMMON's simple
            "json",
            "--task",
            "noised_language_modeling",
            "--path",
            checkpoint,
            "--valid-subset",
            subsets,
            "--batch-size",
            3,
        ]
    )
    stats = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        found = re.search(r"\| (valid|test) \| (\{.*\})$", line)
        if found:
            stats[found.group(1)] = json.loads(found.group(2))
    return stats


@pytest.mark.slow
def test_fairseq_validate_scores_every_token_once_and_resets_the_state_per_subset(tiny, checkpoint):
    both = validate_cli(tiny, checkpoint, "valid,test")
    alone = validate_cli(tiny, checkpoint, "test")
    # fairseq-validate reduces each subset's logging outputs at once: wpb is the subset's total
    # number of scored tokens
    assert float(both["valid"]["valid_wpb"]) == stream_of(tiny, "valid").numel() - 1
    assert float(both["test"]["test_wpb"]) == stream_of(tiny, "test").numel() - 1
    assert both["test"]["test_wpb"] == alone["test"]["test_wpb"]
    assert float(both["valid"]["valid_bsz"]) % 3 == 0  # 3 rows per batch
    # the state that valid leaves changes the test loss in the first or second decimal (here
    # 7.074 instead of 7.176 when it was carried over); reset, test after valid is test alone
    assert both["test"]["test_loss"] == alone["test"]["test_loss"], (both, alone)
