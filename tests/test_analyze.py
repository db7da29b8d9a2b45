"""``fairseq-noise-analyze``: every subcommand against an independent computation.

Fast tier: the mathematics, log parsing, ``curves`` on synthetic logs and the one-line errors,
in process. Slow tier (``slow``): a tiny ``noising_lstm_lm_small`` (hidden size 16) is trained
for 5 updates on the small PTB slice. The independent side reads the raw text files (not the
binarized data), counts n-grams with Python sets and Counters, and runs the model itself over the
token stream (blocks of 35 from a zero state, or whole rows for the stateful mode), so it shares
no code with the analysis but the model's forward pass; and one run of the console script.
"""

import json
import math
import shlex
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    CLI_ENV,
    TINY_NOISING_LM,
    TOKENS_PER_SAMPLE,
    cli,
    lm_train_argv,
    one_line,
    run_cli,
)
from row_kit import LOG, write_row

from fairseq_noising.analysis import divergence, logs, ngrams, plots, pseudocounts
from fairseq_noising.cli import analyze
from fairseq_noising.errors import NoisingError

# one pytest-xdist worker: the module's fixtures (trained checkpoints) are built once
pytestmark = pytest.mark.xdist_group("analyze")

BLOCK = TOKENS_PER_SAMPLE  # the tiny model's --tokens-per-sample
SHARPER = 50.0  # mc-eval's oracle: the tiny model's output layer scaled by this


# --------------------------------------------------------------------------------------------
# the tiny model and the independent reference


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: on two shared cores torch's thread pool spins (an LSTM batch takes
    seconds instead of milliseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(ptb_small_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    save = root / "unigram"
    train = ["--max-update", 5, "--batch-size", 20, "--required-batch-size-multiple", 1]
    train += ["--optimizer", "adam", "--lr", 0.01, "--seed", 1]
    train += ["--save-dir", save, "--no-epoch-checkpoints"]
    options = dict(model=TINY_NOISING_LM, scheme="unigram", gamma=0.2)
    proc = run_cli(["fairseq-train", *lm_train_argv(ptb_small_bin, *train, **options)], env=CLI_ENV)
    (save / "train.log").write_text(proc.stdout + proc.stderr)
    return {
        "data": ptb_small_bin,
        "ckpt": save / "checkpoint_best.pt",
        "dir": save,
        "raw": ptb_small_bin.parent / "raw",
        "root": root,
    }


@pytest.fixture(scope="module")
def reference(tiny):
    """The model and the raw-text streams, loaded without the analysis code."""
    from fairseq import checkpoint_utils

    import fairseq_noising.models  # noqa: F401  (registers with fairseq)
    import fairseq_noising.tasks  # noqa: F401  (registers with fairseq)

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(tiny["ckpt"])], arg_overrides={"data": str(tiny["data"])}
    )
    model = models[0].eval()
    d = task.dictionary

    def stream(name):
        ids = []
        for line in (tiny["raw"] / f"ptb.{name}.txt").read_text().splitlines():
            ids += [d.index(w) for w in line.split()] + [d.eos()]
        return ids

    return {"model": model, "dict": d, "stream": stream}


@torch.no_grad()
def block_nll(ref, stream):
    """-log p of every target of ``stream``, blocks of 35 from a zero state, context [</s>] + stream."""
    s = [ref["dict"].eos()] + list(stream)
    out_nll, out_lp = [], []
    for start in range(0, len(stream), BLOCK):
        src = torch.tensor([s[start : start + BLOCK]])
        tgt = torch.tensor(stream[start : start + BLOCK])
        net = ref["model"](src, src_lengths=torch.tensor([src.size(1)]))
        lp = ref["model"].get_normalized_probs(net, log_probs=True)[0].double()
        out_lp.append(lp)
        out_nll.append(-lp.gather(-1, tgt[:, None])[:, 0])
    return torch.cat(out_nll).numpy(), torch.cat(out_lp)


def run(argv):
    return analyze.main([str(a) for a in argv])


def png_ok(path: Path):
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------
# kl


def test_kl_of_a_known_distribution():
    log_p = torch.log(
        torch.tensor(
            [[0.5, 0.25, 0.125, 0.125, 0.0], [0.1, 0.2, 0.3, 0.2, 0.2]], dtype=torch.float64
        )
    )
    support = torch.tensor([0, 1, 2, 3])  # type 4 unseen in training
    q = np.array([0.4, 0.3, 0.2, 0.1])
    kl, outside = divergence.kl_on_support(log_p, support, torch.log(torch.tensor(q)))
    p0 = np.array([0.5, 0.25, 0.125, 0.125])
    p1 = np.array([0.1, 0.2, 0.3, 0.2]) / 0.8
    expected = [float((p * np.log(p / q)).sum()) for p in (p0, p1)]
    np.testing.assert_allclose(kl.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(outside.numpy(), [0.0, 0.2], atol=1e-12)
    # KL to the uniform distribution of a point mass is log |R|; of the uniform itself 0
    u = torch.full((4,), -math.log(4), dtype=torch.float64)
    point = torch.log(torch.tensor([[1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64))
    kl, _ = divergence.kl_on_support(point, torch.arange(4), u)
    np.testing.assert_allclose(kl.numpy(), [math.log(4), 0.0], atol=1e-12)
    counts = np.array([0, 0, 5, 3, 2, 0])
    mask = divergence.real_vocabulary(counts)
    lu, lq = divergence.reference_log_probs(counts, mask)
    np.testing.assert_allclose(np.exp(lq), [0.5, 0.3, 0.2])
    np.testing.assert_allclose(np.exp(lu), [1 / 3] * 3)


@pytest.mark.slow
def test_kl_cli_matches_an_independent_computation(tiny, reference, tmp_path):
    png = tmp_path / "kl.png"
    result = run(
        [
            "kl",
            f"tiny={tiny['ckpt']}",
            "--data",
            tiny["data"],
            "--cpu",
            "--log-format",
            "none",
            "--output",
            png,
            "--json",
            tmp_path / "kl.json",
        ]
    )
    png_ok(png)
    assert json.loads((tmp_path / "kl.json").read_text())["models"][0]["label"] == "tiny"
    r = result["models"][0]

    valid = reference["stream"]("valid")
    nll, lp = block_nll(reference, valid)
    counts = Counter(reference["stream"]("train"))
    seen = np.array(sorted(counts))
    c = np.array([counts[i] for i in seen], dtype=np.float64)
    q = c / c.sum()
    p = lp[:, seen].double().exp().numpy()  # float64, as the tool computes
    outside = 1.0 - p.sum(1)
    p = p / p.sum(1, keepdims=True)
    kl_u = (p * np.log(p * len(seen))).sum(1).mean()
    kl_q = (p * np.log(p / q)).sum(1).mean()

    assert r["positions"] == len(valid)
    assert r["vocab_size"] == len(seen)
    np.testing.assert_allclose(r["ppl"], math.exp(nll.mean()), rtol=1e-5)
    # float32 models run batched (the tool) and row by row (here): KL agrees to ~1e-6 nats
    np.testing.assert_allclose(r["kl_uniform"], kl_u, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r["kl_unigram"], kl_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r["mass_outside_vocab"], outside.mean(), rtol=1e-4, atol=1e-9)


# --------------------------------------------------------------------------------------------
# unseen


def brute_force_unseen(train, stream, eos):
    t = [eos] + list(train)
    bigrams = {tuple(t[i : i + 2]) for i in range(len(t) - 1)}
    trigrams = {tuple(t[i : i + 3]) for i in range(len(t) - 2)}
    s = [eos] + list(stream)
    bi = [(s[p], s[p + 1]) not in bigrams for p in range(len(stream))]
    tri = [p >= 1 and (s[p - 1], s[p], s[p + 1]) not in trigrams for p in range(len(stream))]
    return np.array(bi), np.array(tri)


@pytest.mark.slow
def test_unseen_cli_matches_brute_force(tiny, reference, tmp_path):
    png = tmp_path / "unseen.png"
    result = run(
        [
            "unseen",
            f"a={tiny['ckpt']}",
            f"b={tiny['ckpt']}",
            "--data",
            tiny["data"],
            "--cpu",
            "--log-format",
            "none",
            "--batch-size",
            "7",
            "--output",
            png,
        ]
    )
    png_ok(png)
    valid = reference["stream"]("valid")
    bi, tri = brute_force_unseen(reference["stream"]("train"), valid, reference["dict"].eos())
    nll, _ = block_nll(reference, valid)
    assert bi.sum() > 100 and tri.sum() > bi.sum()
    assert [r["label"] for r in result["models"]] == ["a", "b"]
    for r in result["models"]:
        assert r["all_positions"] == len(valid)
        assert r["bigram_positions"] == int(bi.sum())
        assert r["trigram_positions"] == int(tri.sum())
        np.testing.assert_allclose(r["all_ppl"], math.exp(nll.mean()), rtol=1e-5)
        np.testing.assert_allclose(r["bigram_ppl"], math.exp(nll[bi].mean()), rtol=1e-5)
        np.testing.assert_allclose(r["trigram_ppl"], math.exp(nll[tri].mean()), rtol=1e-5)


@pytest.mark.slow
@torch.no_grad()
def test_stateful_mode_carries_the_state_over_whole_rows(tiny, reference):
    rows = 4
    result = run(
        [
            "unseen",
            tiny["ckpt"],
            "--data",
            tiny["data"],
            "--cpu",
            "--log-format",
            "none",
            "--eval-mode",
            "stateful",
            "--batch-size",
            rows,
        ]
    )
    r = result["models"][0]
    assert r["stateful"]
    valid = reference["stream"]("valid")
    # evaluation rows cover the whole stream: its end is padded, every token but the first scored
    length = -(-(len(valid) - 1) // rows)
    pad = reference["dict"].pad()
    padded = np.concatenate([valid, np.full(rows * length + 1 - len(valid), pad)])
    src = torch.tensor(padded[: rows * length]).view(rows, length)
    tgt = torch.tensor(padded[1 : rows * length + 1]).view(rows, length)
    model = reference["model"]
    net = model(src, src_lengths=torch.full((rows,), length))  # one pass over whole rows
    lp = model.get_normalized_probs(net, log_probs=True).double()
    nll = -lp.gather(-1, tgt[..., None])[..., 0]
    positions = (np.arange(rows)[:, None] * length + np.arange(length)[None, :] + 1).ravel()
    real = tgt.numpy().ravel() != pad
    bi, tri = brute_force_unseen(reference["stream"]("train"), valid, reference["dict"].eos())
    nll, positions = nll.numpy().ravel()[real], positions[real]
    assert r["all_positions"] == len(valid) - 1
    assert r["bigram_positions"] == int(bi[positions].sum())
    assert r["trigram_positions"] == int(tri[positions].sum())
    np.testing.assert_allclose(r["all_ppl"], math.exp(nll.mean()), rtol=1e-4)
    np.testing.assert_allclose(r["bigram_ppl"], math.exp(nll[bi[positions]].mean()), rtol=1e-4)


def test_ngram_index_convention():
    index = ngrams.NgramIndex([5, 6, 2, 5, 7, 2], vocab_size=10, eos=2)
    bi, tri, defined = index.unseen([5, 7, 6, 2])
    # bigrams (2,5) (5,7) seen, (7,6) unseen, (6,2) seen
    assert bi.tolist() == [False, False, True, False]
    # trigrams (2,5,7) seen, (5,7,6) unseen, (7,6,2) unseen; position 0 undefined
    assert tri.tolist() == [False, False, True, True] and defined.tolist() == [
        False,
        True,
        True,
        True,
    ]


# --------------------------------------------------------------------------------------------
# mc-eval


@pytest.mark.slow
def test_mc_eval_with_one_clean_sample_is_the_plain_evaluation(tiny, reference):
    result = run(
        [
            "mc-eval",
            tiny["ckpt"],
            "--data",
            tiny["data"],
            "--cpu",
            "--log-format",
            "none",
            "--samples",
            "1",
            "--noise-gamma",
            "0",
        ]
    )
    r = result["models"][0]
    assert r["test_scheme"] == "unigram" and r["test_gamma"] == 0.0 and r["trained_gamma"] == 0.2
    assert r["mc_ppl"] == r["ppl"]
    nll, _ = block_nll(reference, reference["stream"]("test"))
    assert r["positions"] == len(nll)
    np.testing.assert_allclose(r["ppl"], math.exp(nll.mean()), rtol=1e-5)
    assert r["plain_seconds"] > 0 and r["mc_seconds"] > 0


@pytest.fixture(scope="module")
def sharp(tiny, tmp_path_factory):
    """The tiny checkpoint with its output layer scaled up (its predictions then depend on the
    context enough for a mean of log-probabilities to differ from one of probabilities), its
    model, and the noiser its training task builds (unigram 0.2, its seed)."""
    from fairseq import checkpoint_utils

    import fairseq_noising.models  # noqa: F401  (registers with fairseq)
    import fairseq_noising.tasks  # noqa: F401  (registers with fairseq)
    from fairseq_noising.checkpoint_safety import read_checkpoint

    state = read_checkpoint(str(tiny["ckpt"]))
    weight = "decoder.output_projection.weight"
    state["model"][weight] = state["model"][weight] * SHARPER
    path = tmp_path_factory.mktemp("sharp") / "sharp.pt"
    torch.save(state, path)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(path)], arg_overrides={"data": str(tiny["data"])}
    )
    task.load_dataset("train")
    noiser = task.dataset("train").noisers["target"]
    return {"path": path, "model": models[0].eval(), "noiser": noiser, "seed": task.args.seed}


@torch.no_grad()
def mc_reference(model, rows, noised_rows, targets, pad, samples):
    """-log of the mean over ``samples`` copies of p(target | noised row k), each row in one
    forward pass from a zero state, and the same with the log-probabilities averaged instead;
    over the real targets."""
    lps = []
    for k in range(samples):
        src = torch.from_numpy(np.stack([noised_rows(r, k + 1) for r in range(rows)]))
        net = model(src, src_lengths=None)
        lp = model.get_normalized_probs(net, log_probs=True).double()
        lps.append(lp.gather(-1, targets[..., None])[..., 0])
    lps, real = torch.stack(lps), targets != pad
    mc = -(lps.exp().mean(0).log())[real]
    return mc.numpy(), -(lps.mean(0)[real]).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["stateless", "stateful"])
def test_mc_eval_averages_the_probabilities_of_the_noised_copies(sharp, tiny, reference, mode):
    """K = 3 copies of the checkpoint's own noise: p_MC(y) = mean over k of p(y | noised context
    k), computed here by feeding the noised contexts by hand: stateless, block by block (id =
    block index, positions = columns); stateful, whole rows in one pass, each block of a row
    noised with its dataset id (block x rows + row) and its columns, so that each copy carries its
    own state. Epochs 1..K, as the tool draws them."""
    rows = 4  # the stateful mode's rows; stateless, the tool batches 5 blocks
    argv = ["mc-eval", sharp["path"], "--data", tiny["data"], "--cpu", "--log-format", "none"]
    argv += ["--samples", 3, "--seed", sharp["seed"], "--eval-mode", mode]
    argv += ["--batch-size", rows if mode == "stateful" else 5]
    r = run(argv)["models"][0]
    assert (r["test_scheme"], r["test_gamma"], r["samples"]) == ("unigram", 0.2, 3)
    assert r["stateful"] == (mode == "stateful")

    stream, pad = reference["stream"]("test"), reference["dict"].pad()
    if mode == "stateless":  # one row of blocks, each from a zero state
        context = np.array([reference["dict"].eos()] + stream[:-1])
        blocks = range(0, len(stream), BLOCK)
        mc, log_mean = [], []
        for i, start in enumerate(blocks):
            ctx = context[None, start : start + BLOCK]
            cols = np.arange(ctx.shape[1])[None, :]

            def noised(row, epoch, ctx=ctx, cols=cols, i=i):
                return sharp["noiser"](ctx, None, np.array([i]), cols, epoch).context[0]

            target = torch.tensor([stream[start : start + BLOCK]])
            a, b = mc_reference(sharp["model"], 1, noised, target, pad, 3)
            mc.append(a)
            log_mean.append(b)
        mc, log_mean = np.concatenate(mc), np.concatenate(log_mean)
    else:  # rows of the stream, its end padded, every token but the first scored
        length = -(-(len(stream) - 1) // rows)
        padded = np.concatenate([stream, np.full(rows * length + 1 - len(stream), pad)])
        src = padded[: rows * length].reshape(rows, length)
        target = torch.tensor(padded[1 : rows * length + 1].reshape(rows, length))

        def noised(row, epoch):
            out = []
            for block, start in enumerate(range(0, length, BLOCK)):
                ctx = src[row : row + 1, start : start + BLOCK]
                cols = np.arange(ctx.shape[1])[None, :]
                ids = np.array([block * rows + row])
                out.append(sharp["noiser"](ctx, None, ids, cols, epoch).context[0])
            return np.concatenate(out)

        mc, log_mean = mc_reference(sharp["model"], rows, noised, target, pad, 3)

    assert r["positions"] == len(mc)
    np.testing.assert_allclose(r["mc_ppl"], math.exp(mc.mean()), rtol=1e-5)
    # what the test tells apart: the mean of the probabilities, not of the log-probabilities
    assert abs(math.exp(log_mean.mean()) / math.exp(mc.mean()) - 1) > 1e-3


@pytest.mark.slow
def test_mc_eval_noised_samples_are_deterministic(tiny):
    argv = [
        "mc-eval",
        tiny["ckpt"],
        "--data",
        tiny["data"],
        "--cpu",
        "--log-format",
        "none",
        "--split",
        "valid",
        "--samples",
        "3",
        "--noise-scheme",
        "blank",
        "--noise-gamma",
        "0.5",
        "--eval-mode",
        "stateful",
        "--batch-size",
        "4",
    ]
    first, second = run(argv)["models"][0], run(argv)["models"][0]
    assert first["mc_ppl"] == second["mc_ppl"]
    assert math.isfinite(first["mc_ppl"]) and first["mc_ppl"] != first["ppl"]
    assert first["samples"] == 3 and first["test_scheme"] == "blank"


# --------------------------------------------------------------------------------------------
# curves and sweep: synthetic logs


CONFIG = (
    "2024-01-01 00:00:00 | INFO | fairseq_cli.train | {'_name': None, 'task': {'_name': "
    "'noised_language_modeling', 'noise_scheme': %s, 'noise_gamma': %s, 'seed': 1}}\n"
)

# fairseq pads the GPU's name to 40 characters
GPU_LINE = (
    "2024-01-01 00:00:01 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; "
    "total memory = 79.179 GB ; name = " + f"{'NVIDIA H100 80GB HBM3':40s}" + "\n"
)
SIMPLE = (
    CONFIG % ("kn", "0.2")
    + GPU_LINE
    + """\
2024-01-01 00:00:01 | INFO | train_inner | epoch 001:    100 / 200 loss=9.1, ppl=549.0, wps=1
2024-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8 | ppl 256.5 | wps 1
2024-01-01 00:00:02 | INFO | train | epoch 001 | loss 8.5 | ppl 362.04 | wps 100 | num_updates 200 | lr 1 | wall 58
2024-01-01 00:00:03 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7 | ppl 128.25 | wps 1
2024-01-01 00:00:03 | INFO | valid | epoch 002 | valid on 'test' subset | loss 6 | ppl 64 | wps 1
2024-01-01 00:00:03 | INFO | train | epoch 002 | loss 7.5 | ppl 181.02 | wps 100 | num_updates 400 | lr 0.5 | wall 120
2024-01-01 00:00:04 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 7.2 | ppl 140.0 | wps 1
2024-01-01 00:00:04 | INFO | train | epoch 003 | loss 7.0 | ppl 128.5 | wps 100 | num_updates 600 | lr 0.25 | wall 181
"""
)

JSON = (
    CONFIG % ("none", "0.0")
    + """\
2024-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "9.1", "ppl": "549"}
2024-01-01 00:00:02 | INFO | valid | {"epoch": 1, "valid_loss": "8.2", "valid_ppl": "300.1", "valid_wps": "1"}
2024-01-01 00:00:02 | INFO | train | {"epoch": 1, "train_loss": "8.6", "train_ppl": "390.2", "train_wps": "1", "train_lr": "1", "train_wall": "30"}
2024-01-01 00:00:03 | INFO | valid | {"epoch": 2, "valid_loss": "7.9", "valid_ppl": "240.5", "valid_wps": "1"}
2024-01-01 00:00:03 | INFO | train | {"epoch": 2, "train_loss": "7.7", "train_ppl": "210.75", "train_wps": "1", "train_lr": "1", "train_wall": "61"}
"""
)

TQDM = """\
epoch 001 | valid on 'valid' subset | loss 8 | ppl 260 | wps 1
epoch 001 | loss 9 | ppl 512 | wps 100
"""


def test_logs_are_parsed_exactly():
    simple = logs.parse_log(SIMPLE)
    assert simple.train_ppl == {1: 362.04, 2: 181.02, 3: 128.5}
    assert simple.valid_ppl == {1: 256.5, 2: 128.25, 3: 140.0}
    assert simple.best_valid_ppl == 128.25
    assert logs.parse_log(SIMPLE, subset="test").valid_ppl == {2: 64.0}
    js = logs.parse_log(JSON)
    assert js.train_ppl == {1: 390.2, 2: 210.75} and js.valid_ppl == {1: 300.1, 2: 240.5}
    tq = logs.parse_log(TQDM)
    assert tq.train_ppl == {1: 512.0} and tq.valid_ppl == {1: 260.0}


def test_logs_give_the_learning_rate_wall_time_and_position_of_each_epoch():
    simple = logs.parse_log(SIMPLE)
    assert simple.lr == {1: 1.0, 2: 0.5, 3: 0.25} and simple.halvings == 2
    assert simple.wall == {1: 58.0, 2: 120.0, 3: 181.0} and simple.wall_seconds == 181.0
    assert simple.epochs_done == 3.0 and simple.current_lr == 0.25
    js = logs.parse_log(JSON)
    assert js.lr == {1: 1.0, 2: 1.0} and js.halvings == 0 and js.wall_seconds == 61.0
    # half of epoch 3 trained (a train_inner line after epoch 2's summary)
    inside = logs.parse_log(JSON + '| train_inner | {"epoch": 3, "update": 2.5, "lr": "0.5"}\n')
    assert inside.epochs_done == 2.5 and inside.current_lr == 0.5
    # a resumed run repeats an epoch: its last summary counts, and a rise is no halving
    resumed = logs.parse_log(
        "epoch 001 | loss 9 | ppl 512 | lr 1 | wall 10\n"
        "epoch 002 | loss 8 | ppl 256 | lr 0.5 | wall 20\n"
        "epoch 002 | loss 8 | ppl 250 | lr 0.5 | wall 25\n"
        "epoch 003 | loss 7 | ppl 128 | lr 0.0005 | wall 31\n"
        "epoch 004 | loss 7 | ppl 128 | lr 0.001 | wall 40\n"
    )
    assert resumed.wall == {1: 10.0, 2: 25.0, 3: 31.0, 4: 40.0} and resumed.halvings == 2
    assert resumed.wall_seconds == 40.0  # no configuration dump: one process
    # a run resumed by a second process (which restarts fairseq's wall clock): the processes'
    # last walls add up, and the epoch repeated from the checkpoint counts once per process
    two = logs.parse_log(
        CONFIG % ("kn", "0.2")
        + "epoch 001 | loss 9 | ppl 512 | lr 1 | wall 100\n"
        + "epoch 002 | loss 8 | ppl 256 | lr 1 | wall 210\n"
        + CONFIG % ("kn", "0.2")
        + "epoch 002 | loss 8 | ppl 250 | lr 1 | wall 95\n"
        + "epoch 003 | loss 7 | ppl 128 | lr 0.5 | wall 190\n"
    )
    assert two.wall == {1: 100.0, 2: 95.0, 3: 190.0} and two.wall_seconds == 400.0
    assert two.halvings == 1


def test_curves_reads_the_logs(tmp_path, capsys):
    (tmp_path / "kn.log").write_text(SIMPLE)
    (tmp_path / "none.log").write_text(JSON)
    png = tmp_path / "curves.png"
    run(
        [
            "curves",
            tmp_path / "kn.log",
            f"plain={tmp_path / 'none.log'}",
            "--output",
            png,
            "--json",
            tmp_path / "c.json",
        ]
    )
    png_ok(png)
    written = json.loads((tmp_path / "c.json").read_text())
    # the command as run, which a shell reads back as the same words
    assert shlex.split(written["command_line"]) == [
        "fairseq-noise-analyze",
        "curves",
        str(tmp_path / "kn.log"),
        f"plain={tmp_path / 'none.log'}",
        "--output",
        str(png),
        "--json",
        str(tmp_path / "c.json"),
    ]
    assert written["command"] == "curves" and written["seconds"] >= 0
    out = written["runs"]
    assert out["plain"]["valid_ppl"] == {"1": 300.1, "2": 240.5}
    # a log is labelled by its name: how it was noised is no log's to say
    assert out["kn"]["train_ppl"] == {"1": 362.04, "2": 181.02, "3": 128.5}
    assert out["kn"]["scheme"] is None
    printed = capsys.readouterr().out
    assert "plain" in printed and "128.50" in printed and f"wrote {png}" in printed


def test_curves_mark_the_first_epoch_at_each_halved_rate(tmp_path, capsys, monkeypatch):
    # by hand from the rates per epoch: 1, 1, 0.5, 0.5, 0.125 -> halved before 3 and 5 (twice
    # at once counts once: one lower rate); a rate that goes back up is no halving
    assert logs.lowered_at({1: 1.0, 2: 1.0, 3: 0.5, 4: 0.5, 5: 0.125}) == [3, 5]
    assert logs.lowered_at({2: 0.5, 1: 1.0, 3: 1.0}) == [2] and logs.lowered_at({}) == []
    (tmp_path / "kn.log").write_text(SIMPLE)  # lr 1, 0.5, 0.25
    drawn = []
    monkeypatch.setattr(plots, "curves", lambda runs, png, halved: drawn.append(halved))
    out = run(["curves", tmp_path / "kn.log", "--output", tmp_path / "c.png"])
    assert out["runs"]["kn"]["lr"] == {1: 1.0, 2: 0.5, 3: 0.25} and drawn == [{"kn": [2, 3]}]
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["run", "epoch", "train", "ppl", "valid", "ppl", "lr"]
    assert table[-2].split()[-1] == "0.25"  # epoch 3, before the "wrote" line
    # the figure: a triangle on the validation curve at each such epoch (7 has no validation)
    monkeypatch.undo()
    valid = {1: 256.5, 2: 128.25, 3: 140.0}
    fig = plots.curves_figure({"kn": ({1: 362.0}, valid)}, halved={"kn": [2, 3, 7]})
    [marks] = [line for line in fig.axes[0].get_lines() if line.get_marker() == "v"]
    assert list(marks.get_xdata()) == [2, 3] and list(marks.get_ydata()) == [128.25, 140.0]
    assert "first epoch at a halved rate" in [t.get_text() for t in fig.axes[0].get_legend().texts]


def test_a_sweeps_folder_stands_for_its_rows(tmp_path, capsys):
    # two rows as Hydra and fairseq write them, the page's logs folder and a stray file beside
    sweep = tmp_path / "sweep"
    write_row(sweep / "kn-g0.2-s1", log=LOG)  # best validation 16.0 at epoch 2
    write_row(sweep / "none-g0-s1", log=LOG[:2], scheme="none", gamma=0)  # 32.0
    (sweep / "results-logs").mkdir()
    (sweep / "results-logs" / "kn-g0.2-s1.train.log").write_text(SIMPLE)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    points = run(["sweep", sweep])["points"]
    assert [(p["scheme"], p["gamma"], p["best_valid_ppl"], p["source"]) for p in points] == [
        ("kn", 0.2, 16.0, "row"),
        ("none", 0.0, 32.0, "row"),
    ]
    runs = run(["curves", sweep])["runs"]
    assert list(runs) == ["kn-g0.2-s1 (kn 0.2)", "none-g0-s1 (none 0)"]
    assert runs["kn-g0.2-s1 (kn 0.2)"]["lr"] == {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.25, 5: 0.25}
    # a row's own folder is that row alone; a folder of neither rows nor logs says so
    assert len(run(["curves", sweep / "none-g0-s1"])["runs"]) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoisingError, match="empty holds no sweep row, checkpoint_best.pt nor"):
        run(["sweep", tmp_path / "empty"])


@pytest.mark.slow
def test_sweep_from_logs_and_a_checkpoint(tiny, tmp_path):
    from fairseq import checkpoint_utils

    from fairseq_noising.checkpoint_safety import allow_fairseq_checkpoints

    allow_fairseq_checkpoints()  # for the checkpoint this test reads itself, below
    runs = []
    for scheme, gamma, best in (
        ("unigram", 0.1, 120.0),
        ("unigram", 0.4, 150.0),
        ("ad", 0.4, 110.0),
    ):
        text = CONFIG % (scheme, gamma) + (
            f"x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7 | ppl {best + 10} | wps 1\n"
            f"x | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7 | ppl {best} | wps 1\n"
        )
        path = tmp_path / f"{scheme}{gamma}.log"
        path.write_text(text)
        runs.append(f"{scheme}:{gamma}={path}")  # a log does not say how it was noised
    bare = tmp_path / "bare.log"
    bare.write_text(TQDM)
    png = tmp_path / "sweep.png"
    result = run(["sweep", *runs, f"blank:0.3={bare}", tiny["ckpt"], "--output", png])
    png_ok(png)
    points = {(p["scheme"], p["gamma"]): p["best_valid_ppl"] for p in result["points"]}
    extra = checkpoint_utils.load_checkpoint_to_cpu(str(tiny["ckpt"]))["extra_state"]
    assert points == {
        ("ad", 0.4): 110.0,
        ("blank", 0.3): 260.0,
        ("unigram", 0.1): 120.0,
        ("unigram", 0.4): 150.0,
        ("unigram", 0.2): 2.0 ** extra["best"],
    }
    # the run directory: its checkpoint_best.pt, which says how it was noised
    from_dir = run(["sweep", tiny["dir"]])["points"][0]
    assert (from_dir["source"], from_dir["scheme"], from_dir["gamma"]) == (
        "checkpoint",
        "unigram",
        0.2,
    )
    assert from_dir["best_valid_ppl"] == 2.0 ** extra["best"]


# --------------------------------------------------------------------------------------------
# pseudocounts


def brute_force_expectation(context, target, gamma, q, ordinary, noise_target, v):
    """E[c~(a, b)] summed position by position over the outcomes of each position."""
    out = np.zeros((v, v))
    for x, y in zip(context, target):
        g = gamma[x]
        out[x, y] += 1 - g
        for a in range(v):
            if noise_target and ordinary[y]:
                for b in range(v):
                    out[a, b] += g * q[a] * q[b]
            else:
                out[a, y] += g * q[a]
    return out


@pytest.mark.parametrize("name", ["unigram", "blank", "kn"])
def test_expected_pseudocounts_match_brute_force(name):
    v = 7  # 0 pad, 1 eos, 2 blank (special), 3..6 ordinary
    rng = np.random.default_rng(0)
    context = rng.integers(1, 7, size=200)
    context[context == 2] = 3
    target = rng.integers(1, 7, size=200)
    target[target == 2] = 4
    ordinary = np.array([False, False, False, True, True, True, True])
    gamma = (
        np.where(ordinary, [0, 0, 0, 0.1, 0.3, 0.2, 0.5], 0.0)
        if name == "kn"
        else np.where(ordinary, 0.25, 0.0)
    )
    if name == "blank":
        q = np.eye(v)[2]
    else:
        q = np.where(ordinary, [0, 0, 0, 4, 3, 2, 1], 0).astype(float)
        q /= q.sum()
    keys, counts = pseudocounts.pair_counts(context, target, v)
    exp = pseudocounts.ExpectedCounts(keys, counts, gamma, q, ordinary, name == "kn")
    cells = np.arange(v * v)
    brute = brute_force_expectation(context, target, gamma, q, ordinary, name == "kn", v)
    np.testing.assert_allclose(exp(cells), brute.ravel(), atol=1e-9)
    assert abs(exp(cells).sum() - len(context)) < 1e-9
    if name == "unigram":
        np.testing.assert_allclose(exp.interpolation(cells, 0.25), brute.ravel(), atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["unigram", "kn"])
def test_pseudocounts_cli_agrees_with_the_formula(tiny, tmp_path, scheme):
    png = tmp_path / "pc.png"
    result = run(
        [
            "pseudocounts",
            tiny["data"],
            "--noise-scheme",
            scheme,
            "--noise-gamma",
            "0.3",
            "--tokens-per-sample",
            BLOCK,
            "--draws",
            "10",
            "--min-expected",
            "30",
            "--output",
            png,
        ]
    )
    png_ok(png)
    assert result["noised_positions_total"] == 10 * result["positions"]
    assert result["cells_compared"] > 20
    assert result["max_abs_z"] < 5.0
    assert result["max_relative_deviation"] < 0.3
    if scheme == "unigram":
        assert result["interpolation_vs_exact_max_abs"] < 1e-9
        assert result["interpolation_max_relative_deviation"] == pytest.approx(
            result["max_relative_deviation"]
        )


# --------------------------------------------------------------------------------------------
# bad input: one line, ``fairseq-noising: error: <message>``, the prefix once


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["kl"],
            "the following arguments are required: CKPT (see fairseq-noise-analyze kl --help)",
        ),
        (["bogus"], "invalid choice: 'bogus'"),
        (["unseen", "{tmp}/missing.pt", "--eval-mode", "sideways"], "invalid choice: 'sideways'"),
        (["curves", "{tmp}/kn.log", "--bogus"], "unrecognized arguments: --bogus"),
        (["curves", "{tmp}/missing.log"], "missing.log does not exist"),
        (["curves", "{tmp}/empty.log"], "empty.log holds no end-of-epoch perplexity"),
        (["curves", "{tmp}/run"], "run holds no *.log file and no sweep row"),
        (["sweep", "{tmp}/run"], "run holds no sweep row, checkpoint_best.pt nor *.log file"),
        (
            ["sweep", "{tmp}/kn.log"],
            "a log does not say its noising scheme: pass it as SCHEME:GAMMA=",
        ),
        (["sweep", "kn:0.2={tmp}/empty.log"], "empty.log holds no validation perplexity"),
        (["mc-eval", "{tmp}/missing.pt", "--samples", "0"], "--samples must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path):
    (tmp_path / "kn.log").write_text(SIMPLE)
    (tmp_path / "bare.log").write_text(TQDM)
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "run").mkdir()
    with pytest.raises(NoisingError) as error:
        run([a.format(tmp=tmp_path) for a in argv])
    assert message in one_line(error)


@pytest.mark.slow
def test_checkpoint_without_its_data_is_one_line(tiny, tmp_path):
    with pytest.raises(NoisingError) as error:
        run(["kl", tiny["ckpt"], "--data", tmp_path / "nowhere", "--cpu"])
    text = one_line(error)
    assert "nowhere does not exist" in text and text.endswith(
        "pass the binarized data directory with --data"
    )


@pytest.mark.slow
def test_console_script_error_is_one_line_on_stderr(tmp_path):
    proc = subprocess.run(
        [cli("fairseq-noise-analyze"), "curves", str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
        timeout=300,
        env=CLI_ENV,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"fairseq-noising: error: {tmp_path / 'missing.log'} does not exist"
    ]


@pytest.mark.slow
def test_the_analyses_noise_exactly_as_the_checkpoints_training_did(tiny, reference):
    """The CLIs' noiser (``LoadedModel.noiser``) and the one the checkpoint's task trains with
    give the same noise for the same seed and epoch, ``</s>`` included (an ordinary word for a
    language model unless --special-eos)."""
    from fairseq import checkpoint_utils

    from fairseq_noising.cli.model_io import LoadedModel

    _, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(tiny["ckpt"])], arg_overrides={"data": str(tiny["data"])}
    )
    assert not task.args.special_eos
    task.load_dataset("train")
    trained = task.dataset("train").noisers["target"]
    cli = LoadedModel(str(tiny["ckpt"]), data=str(tiny["data"]), seed=task.args.seed).noiser()
    tokens = np.array(reference["stream"]("train")[:4001])
    context, target = tokens[:-1].reshape(40, 100), tokens[1:].reshape(40, 100)
    assert (context == reference["dict"].eos()).sum() > 100
    ids, positions = np.arange(40), np.tile(np.arange(100), (40, 1))
    for epoch in (1, 2):
        a = trained(context, target, ids, positions, epoch)
        b = cli(context, target, ids, positions, epoch)
        assert np.array_equal(a.context, b.context) and np.array_equal(a.target, b.target)
        noised_eos = (context == reference["dict"].eos()) & (a.context != context)
        assert noised_eos.any()  # </s> is noised as an ordinary word, by both
