"""``fairseq-noise-analyze kl|unseen|mc-eval`` on run folders, and ``--match-ppl``.

Fast tier: folders built by hand (empty ``checkpoint<N>.pt`` files beside a fairseq log whose
validation perplexities are chosen here), the checkpoint each argument stands for worked out by
hand, and the one-line errors. Slow tier: a tiny language model trained for four epochs with a
checkpoint per epoch; the oracle is fairseq's own validation, as its log prints it: the epoch
``--match-ppl`` picks is the nearest by brute force over the log's lines, and the analysis of
that checkpoint scores the validation split at the perplexity fairseq logged for that epoch.
"""

import json
import re

import pytest
from conftest import CLI_ENV, TINY_NOISING_LM, lm_train_argv, one_line, run_cli
from row_kit import LOG, write_row

from fairseq_noising.cli import analyze
from fairseq_noising.cli.analyze import arguments
from fairseq_noising.cli.analyze.arguments import expand_sweeps
from fairseq_noising.errors import NoisingError


def run(argv):
    return analyze.main([str(a) for a in argv])


def simple_log(ppl):
    """fairseq's simple log of a run validated at the end of each epoch (``ppl``: {epoch: ppl})."""
    return "".join(
        f"2024-01-01 00:00:0{e} | INFO | valid | epoch {e:03d} | valid on 'valid' subset | "
        f"loss 7 | ppl {p} | wps 1\n"
        for e, p in sorted(ppl.items())
    )


def run_folder(path, ppl, epochs=None, log="train.log"):
    """A run folder: ``checkpoint<N>.pt`` (empty) for each of ``epochs`` (default: every epoch
    of ``ppl``), checkpoint_best.pt and checkpoint_last.pt, and the log."""
    path.mkdir(parents=True, exist_ok=True)
    for e in ppl if epochs is None else epochs:
        (path / f"checkpoint{e}.pt").write_bytes(b"")
    (path / "checkpoint_best.pt").write_bytes(b"")
    (path / "checkpoint_last.pt").write_bytes(b"")
    (path / log).write_text(simple_log(ppl))
    return path


def picked(picks):
    return [(p.path.rsplit("/", 1)[-1], p.epoch, p.logged_ppl) for p in picks]


def test_each_folder_gives_the_epoch_nearest_the_target(tmp_path):
    a = run_folder(tmp_path / "a", {1: 300.0, 2: 200.0, 3: 150.0, 4: 140.0})
    b = run_folder(tmp_path / "b", {1: 280.0, 2: 170.0, 3: 120.0})
    picks, target = arguments.resolve([str(a), f"B={b}"], "160")
    assert target == 160.0
    # a: |150 - 160| = 10 is nearest; b: 170 and 120 are 10 and 40 away
    assert picked(picks) == [("checkpoint3.pt", 3, 150.0), ("checkpoint2.pt", 2, 170.0)]
    assert [p.label for p in picks] == [None, "B"]
    # auto: the lowest perplexity both reached, a's best (140); b's nearest is 120 (20 away)
    picks, target = arguments.resolve([str(a), str(b)], "auto")
    assert target == 140.0
    assert picked(picks) == [("checkpoint4.pt", 4, 140.0), ("checkpoint3.pt", 3, 120.0)]


def test_two_epochs_as_near_give_the_earlier(tmp_path):
    a = run_folder(tmp_path / "a", {1: 170.0, 2: 150.0})
    assert picked(arguments.resolve([str(a)], "160")[0]) == [("checkpoint1.pt", 1, 170.0)]


def test_only_epochs_with_both_a_checkpoint_and_a_validation_count(tmp_path):
    # epoch 2's checkpoint was removed; epoch 4 has a checkpoint but no validation line
    a = run_folder(tmp_path / "a", {1: 300.0, 2: 161.0, 3: 150.0}, epochs=[1, 3, 4])
    assert picked(arguments.resolve([str(a)], "160")[0]) == [("checkpoint3.pt", 3, 150.0)]


def test_a_later_log_gives_an_epochs_figure(tmp_path):
    # a resumed run that validated epoch 2 again (b.log sorts after a.log)
    a = run_folder(tmp_path / "a", {1: 300.0, 2: 200.0}, log="a.log")
    (a / "b.log").write_text(simple_log({2: 161.0}))
    assert picked(arguments.resolve([str(a)], "160")[0]) == [("checkpoint2.pt", 2, 161.0)]


def test_without_match_a_folder_is_its_best_checkpoint_and_a_file_itself(tmp_path):
    a = run_folder(tmp_path / "a", {1: 300.0})
    picks, target = arguments.resolve([f"X={a}", str(a / "checkpoint1.pt")], None)
    assert target is None
    assert [(p.label, p.path, p.epoch) for p in picks] == [
        ("X", str(a / "checkpoint_best.pt"), None),
        (None, str(a / "checkpoint1.pt"), None),
    ]


def test_a_sweeps_folder_stands_for_its_rows(tmp_path):
    sweep = tmp_path / "sweep"
    write_row(sweep / "kn-g0.2-s1", log=LOG)  # valid 32, 16, 22.6, 18.4, 19.7
    write_row(sweep / "none-g0-s1", log=LOG[:2], scheme="none", gamma=0)  # valid 32
    for row, epochs in (("kn-g0.2-s1", range(1, 6)), ("none-g0-s1", [1])):
        for e in epochs:
            (sweep / row / f"checkpoint{e}.pt").write_bytes(b"")
    picks, target = arguments.resolve(expand_sweeps([str(sweep)]), "auto")
    assert target == 32.0
    assert [(p.path.split("/")[-2:], p.epoch) for p in picks] == [
        (["kn-g0.2-s1", "checkpoint1.pt"], 1),
        (["none-g0-s1", "checkpoint1.pt"], 1),
    ]
    picks, _ = arguments.resolve(expand_sweeps([str(sweep / "kn-g0.2-s1")]), "20")
    assert picked(picks) == [("checkpoint5.pt", 5, 19.7)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["unseen", "{tmp}/a", "--match-ppl", "1"], "argument --match-ppl: expected a perplexity"),
        (["kl", "{tmp}/a", "--match-ppl", "low"], "above 1 or 'auto', got 'low'"),
        (["unseen", "{tmp}/a/checkpoint1.pt", "--match-ppl", "auto"], "checkpoint1.pt is a file"),
        (["kl", "{tmp}/gone", "--match-ppl", "auto"], "checkpoint {tmp}/gone does not exist"),
        (["kl", "{tmp}/bare"], "{tmp}/bare holds no checkpoint_best.pt"),
        (
            ["unseen", "{tmp}/bare", "--match-ppl", "auto"],
            "{tmp}/bare holds no checkpoint<N>.pt: train it without --no-epoch-checkpoints "
            "(Hydra: checkpoint.no_epoch_checkpoints=false)",
        ),
        (
            ["mc-eval", "{tmp}/nolog", "--match-ppl", "100"],
            "{tmp}/nolog holds no fairseq log (*.log, *.txt) with the validation perplexity of "
            "epochs 1-2",
        ),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path):
    run_folder(tmp_path / "a", {1: 300.0})
    (tmp_path / "bare").mkdir()
    (tmp_path / "nolog").mkdir()
    for e in (1, 2):
        (tmp_path / "nolog" / f"checkpoint{e}.pt").write_bytes(b"")
    with pytest.raises(NoisingError) as error:
        run([a.format(tmp=tmp_path) for a in argv])
    assert message.format(tmp=tmp_path) in one_line(error)


# --------------------------------------------------------------------------------------------
# slow: a real run, fairseq's own validation as the oracle


@pytest.fixture(scope="module")
def epochs(ptb_tiny_bin, tmp_path_factory):
    """A tiny LM trained 4 epochs, a checkpoint per epoch, fairseq's log kept beside them."""
    save = tmp_path_factory.mktemp("matching") / "unigram"
    train = ["--max-epoch", 4, "--batch-size", 10, "--required-batch-size-multiple", 1]
    train += ["--optimizer", "adam", "--lr", 0.01, "--seed", 1, "--save-dir", save]
    options = dict(model=TINY_NOISING_LM, scheme="unigram", gamma=0.2)
    proc = run_cli(["fairseq-train", *lm_train_argv(ptb_tiny_bin, *train, **options)], env=CLI_ENV)
    (save / "train.log").write_text(proc.stdout + proc.stderr)
    valid = {
        int(e): float(p)
        for e, p in re.findall(
            r"epoch (\d+) \| valid on 'valid' subset \| .*?\| ppl ([\d.]+)",
            proc.stdout + proc.stderr,
        )
    }
    assert sorted(valid) == [1, 2, 3, 4] and len(set(valid.values())) == 4
    return {"data": ptb_tiny_bin, "dir": save, "valid": valid}


@pytest.mark.slow
def test_match_ppl_scores_the_epoch_fairseq_logged_nearest(epochs, tmp_path, capsys):
    valid = epochs["valid"]
    ordered = sorted(valid.values())
    target = (ordered[1] + ordered[2]) / 2 + 0.01  # between two epochs, nearer the worse one
    nearest = min(valid, key=lambda e: abs(valid[e] - target))
    out = tmp_path / "unseen.json"
    argv = ["unseen", f"m={epochs['dir']}", "--match-ppl", f"{target:.4f}", "--cpu"]
    result = run([*argv, "--num-threads", 1, "--log-format", "none", "--json", out])
    (model,) = result["models"]
    assert model["checkpoint"].endswith(f"checkpoint{nearest}.pt")
    assert (model["epoch"], model["logged_valid_ppl"]) == (nearest, valid[nearest])
    assert result["match_ppl"] == pytest.approx(target, abs=1e-4)
    # the analysis scores the validation split as fairseq's validation did (rounded to 2 places)
    assert model["all_ppl"] == pytest.approx(valid[nearest], abs=0.006)
    assert json.loads(out.read_text())["models"][0]["epoch"] == nearest
    said = capsys.readouterr().out
    assert f"  m: epoch {nearest}, {valid[nearest]:.2f}" in said
    # without --match-ppl the folder is its checkpoint_best.pt: the best epoch's model
    best = run(["unseen", epochs["dir"], "--cpu", "--num-threads", 1, "--log-format", "none"])
    (model,) = best["models"]
    assert model["checkpoint"].endswith("checkpoint_best.pt") and "epoch" not in model
    assert model["all_ppl"] == pytest.approx(min(valid.values()), abs=0.006)
    assert model["label"] == "unigram (unigram 0.2)"
