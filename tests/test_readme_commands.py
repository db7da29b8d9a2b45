"""The README's commands work: every ``fairseq-*`` command of its ```bash blocks runs on tiny data.

The commands are read from README.md when the tests run (never copied here): the ```bash fenced
blocks, backslash-continued lines joined, ``#`` comments dropped, optional parts in square brackets
(``[--noise-side both|source|target]``) dropped, and every command that starts with ``fairseq-``
kept. They run in README order in one temporary folder that holds tiny slices of the real data
under the README's own file names (``ptb.train.txt``, ``train.en``, ...), so the README's
``fairseq-preprocess`` commands make the ``data-bin/ptb`` and ``data-bin/iwslt15`` that its
training commands read, and its evaluation commands find the checkpoints in the save dirs its
training commands name. Only ``--user-dir fairseq_noising`` (relative to the repository root) is
pointed at the plugin, and the runs are shrunk by APPENDING flags (the last occurrence of a flag
wins): a few updates of a 16-unit model on CPU. The perplexity fairseq-eval-lm prints and the BLEU
fairseq-generate prints are checked against tests/score_kit.py's (the checkpoint's perplexity on
that split, sacrebleu of the printed hypotheses and references).

A README command stops working (a renamed flag, a flag the scheduler refuses, a checkpoint path
that the training command no longer writes) and ``test_readme_commands_run`` fails naming it;
``test_a_broken_readme_command_fails`` plants such a bug in a copy of the README text and checks
exactly that. The translation command must carry the per-sentence loss the recipes train with, and
the LM and translation commands must agree with the tables' Hydra configs (``recipes/config``:
``ptb_medium``, ``iwslt15``), as Hydra composes them. The README's ``fairseq-hydra-train`` sweeps
run with ``--config-dir`` made absolute and one tiny row on the basic launcher.
"""

import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest
from conftest import PLUGIN_DIR, REPO, head_lines, require_shared, run_cli
from score_kit import block_perplexity, generate_bleu, printed_perplexity, stateful_perplexity

from fairseq_noising.data_prep import ptb as prepare_ptb

README = REPO / "README.md"
# the pages whose commands this file runs, in this order: the README, then the sweeps' page
# (its sweeps read the README's data-bin/ptb)
DOCUMENTED = [README, REPO / "docs" / "sweeps.md"]


def documented() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCUMENTED)


VENV = str(Path(sys.executable).parent.parent)

# appended to each program's README command to make it a tiny CPU run; a fairseq-* command that is
# not listed here fails the test (say here how to shrink it)
OVERRIDES = {
    "fairseq-preprocess": [],
    "fairseq-train": [
        "--max-update",
        "3",
        "--max-epoch",
        "1",
        "--hidden-size",
        "16",
        "--cpu",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--log-format",
        "simple",
    ],
    "fairseq-eval-lm": ["--cpu", "--num-workers", "0"],
    "fairseq-generate": ["--cpu", "--num-workers", "0", "--max-len-a", "0", "--max-len-b", "5"],
    "fairseq-noise-preview": [],
    "fairseq-hydra-train": [
        "++model.hidden_size=16",
        "optimization.max_epoch=1",
        "optimization.max_update=3",
        "hydra/launcher=basic",
        "task={noise_scheme:kn,noise_gamma:0.2}",  # one row
    ],
}
# what a successful run of the program prints (stdout or stderr); the scores of fairseq-eval-lm
# and fairseq-generate are checked too (check_score)
EXPECT = {
    "fairseq-eval-lm": "Perplexity",
    "fairseq-generate": "BLEU",
    "fairseq-train": "done training",
    "fairseq-noise-preview": "noised",
    "fairseq-hydra-train": "results page:",
}


# ---------------------------------------------------------------- reading the README


def bash_blocks(text):
    """The bodies of the ```bash fenced blocks of a markdown text."""
    return re.findall(r"^```bash[ \t]*\n(.*?)^```", text, flags=re.S | re.M)


def readme_commands(text):
    """Every command of the ```bash blocks that starts with fairseq-, as a list of arguments.

    Backslash-continued lines are joined, comments are dropped and so are optional parts in square
    brackets. A command shown elided (with a literal ``...``) is returned too; see ``is_elided``."""
    out = []
    for block in bash_blocks(text):
        joined = re.sub(r"\\\n", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\[[^\]]*\]", " ", line)  # [--noise-side both|source|target]
            args = shlex.split(line, comments=True)
            if args and args[0].startswith("fairseq-"):
                out.append(args)
    return out


def is_elided(args):
    return "..." in args


def flag_values(args):
    """{--flag: value or None} of a command line (the last occurrence wins, as in argparse)."""
    flags, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            if nxt is not None and not nxt.startswith("--"):
                flags[a] = nxt
                i += 2
                continue
            flags[a] = None
        i += 1
    return flags


def training_command(commands, task):
    found = [
        c
        for c in commands
        if c[0] == "fairseq-train" and not is_elided(c) and flag_values(c).get("--task") == task
    ]
    assert len(found) == 1, (
        f"expected one full fairseq-train --task {task} command in README.md, got {found}"
    )
    return found[0]


# ---------------------------------------------------------------- running them


def tiny_raw_data(cwd: Path):
    """Tiny slices of PTB and Multi30k under the file names of the README's preprocess commands."""
    prepare_ptb.head(require_shared("ptb"), cwd, {"train": 200, "valid": 20, "test": 20})
    m30k = require_shared("multi30k")
    for split, src, n in (("train", "train", 200), ("valid", "val", 20), ("test", "test", 20)):
        for lang in ("en", "de"):
            head_lines(m30k / f"{src}.{lang}", cwd / f"{split}.{lang}", n)


def tiny_command(args):
    """The README command as the test runs it: --user-dir made absolute, shrinking flags appended."""
    prog = args[0]
    assert prog in OVERRIDES, (
        f"README.md runs {prog}, which tests/test_readme_commands.py does not know how to shrink: "
        "add it to OVERRIDES"
    )
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a == "--user-dir" and out[i + 1] == "fairseq_noising":
            out[i + 1] = str(PLUGIN_DIR)
        if a == "--config-dir" and out[i + 1] == "recipes/config":
            out[i + 1] = str(REPO / "recipes" / "config")
    if prog == "fairseq-hydra-train":  # a SLURM sweep runs here, on the basic launcher
        out = [a for a in out if not a.startswith(("hydra.launcher.", "hydra/launcher="))]
    return out + OVERRIDES[prog]


def run_readme(text, cwd: Path):
    """Runs every fairseq-* command of a README text in order, in cwd; returns (command, seconds)."""
    tiny_raw_data(cwd)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    timings = []
    for args in readme_commands(text):
        if is_elided(args):
            continue
        cmd = tiny_command(args)
        start = time.perf_counter()
        try:
            proc = run_cli(cmd, cwd=cwd, env=env, timeout=300)
        except AssertionError as e:
            raise AssertionError(
                f"README command failed: {shlex.join(args)}\nran as: {shlex.join(cmd)}\n{e}"
            ) from None
        output = proc.stdout + proc.stderr
        expected = EXPECT.get(args[0])
        assert expected is None or expected in output, (
            f"README command printed no {expected!r}: {shlex.join(args)}\n{output[-3000:]}"
        )
        check_score(cmd, output, cwd)
        timings.append((shlex.join(args[:2]), time.perf_counter() - start))
    return timings


def check_score(cmd, output, cwd: Path):
    """The perplexity fairseq-eval-lm printed is its checkpoint's on that split, and the BLEU
    fairseq-generate printed is sacrebleu's of the hypotheses and references it printed, both
    computed here (tests/score_kit.py)."""
    flags = flag_values(cmd)
    if cmd[0] == "fairseq-eval-lm":
        data, checkpoint = cwd / cmd[1], cwd / flags["--path"]
        subset = flags.get("--gen-subset", "test")
        if "--stateful-bptt" in flags:
            assert flags.get("--batch-size") == "1", "score_kit reads a stateful split in one row"
            expected = stateful_perplexity(checkpoint, data, subset)
        else:
            expected = block_perplexity(checkpoint, data, subset, int(flags["--tokens-per-sample"]))
        assert printed_perplexity(output) == pytest.approx(expected, rel=1e-5, abs=0.006), cmd
    elif cmd[0] == "fairseq-generate" and flags.get("--scoring") == "sacrebleu":
        printed, expected = generate_bleu(
            output, flags.get("--gen-subset", "test"), flags["--beam"]
        )
        assert printed == expected, cmd


# ---------------------------------------------------------------- tests


def test_readme_has_the_commands_this_test_runs():
    commands = readme_commands(README.read_text(encoding="utf-8"))
    progs = [c[0] for c in commands if not is_elided(c)]
    for prog in ("fairseq-preprocess", "fairseq-train", "fairseq-eval-lm", "fairseq-generate"):
        assert prog in progs, f"no {prog} command found in README.md's ```bash blocks"
    swept = [c[0] for c in readme_commands(DOCUMENTED[1].read_text(encoding="utf-8"))]
    assert "fairseq-hydra-train" in swept, "no fairseq-hydra-train command in docs/sweeps.md"
    assert progs.count("fairseq-train") >= 2
    # optional parts were dropped, continuations joined
    assert not any("[" in a or "]" in a or a == "\\" for c in commands for a in c)


def test_the_readme_says_how_its_commands_are_run():
    """Set-up leaves the commands in .venv unactivated: the README says how before its first
    sweep or page command; its SLURM sweep has a CPU form beside the GPU one; and the sweeps'
    page says what submitit's sacct warnings mean on a cluster without accounting."""
    text = documented()
    activate = text.find("source .venv/bin/activate")
    found = [text.find(f"{prog} ") for prog in ("fairseq-hydra-train", "fairseq-noise-page")]
    assert 0 <= activate < min(i for i in found if i >= 0)
    slurm = [c for c in readme_commands(text) if "hydra/launcher=submitit_slurm" in c]
    cpu = [c for c in slurm if not any("gpus_per_node" in a for a in c)]
    assert cpu and any(a.startswith("hydra.launcher.cpus_per_task=") for a in cpu[0])
    assert "common.cpu=true" in cpu[0]
    assert "Bypassing sacct error" in text


def test_translation_command_trains_with_the_recipes_loss():
    commands = readme_commands(README.read_text(encoding="utf-8"))
    mt = training_command(commands, "noised_translation")
    flags = flag_values(mt)
    assert "--sentence-avg" in flags, shlex.join(mt)
    assert flags.get("--best-checkpoint-metric") == "nll_loss", shlex.join(mt)
    lm = training_command(commands, "noised_language_modeling")
    for cmd in (mt, lm):
        f = flag_values(cmd)
        if f.get("--lr-scheduler") == "paper_halving":
            assert f.get("--stop-min-lr") == "0" and f.get("--halvings") == "8", shlex.join(cmd)


def test_elided_snippets_agree_with_a_full_command():
    """The README's headline snippet (``... --noise-gamma 0.2 ...``) is part of a full command."""
    commands = readme_commands(README.read_text(encoding="utf-8"))
    elided = [c for c in commands if is_elided(c)]
    full = [flag_values(c) for c in commands if not is_elided(c)]
    for snippet in elided:
        want = flag_values([a for a in snippet if a != "..."])
        assert any(all(f.get(k, "<missing>") == v for k, v in want.items()) for f in full), (
            shlex.join(snippet)
        )


def same_value(a, b):
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


# a fairseq-train flag and the key of a table's Hydra config that holds the same setting
CONFIG_KEYS = {
    "--task": "task._name",
    "--stateful-bptt": "task.stateful_bptt",
    "--tokens-per-sample": "task.tokens_per_sample",
    "--arch": "model._name",
    "--criterion": "criterion._name",
    "--sentence-avg": "optimization.sentence_avg",
    "--batch-size": "dataset.batch_size",
    "--required-batch-size-multiple": "dataset.required_batch_size_multiple",
    "--optimizer": "optimizer._name",
    "--lr": "optimization.lr.0",
    "--clip-norm": "optimization.clip_norm",
    "--lr-scheduler": "lr_scheduler._name",
    "--halvings": "lr_scheduler.halvings",
    "--halving-threshold": "lr_scheduler.halving_threshold",
    "--stop-min-lr": "optimization.stop_min_lr",
    "--max-epoch": "optimization.max_epoch",
    "--best-checkpoint-metric": "checkpoint.best_checkpoint_metric",
    "--no-epoch-checkpoints": "checkpoint.no_epoch_checkpoints",
}
WHERE = ("--user-dir", "--save-dir", "--noise-scheme", "--noise-gamma")  # places, and the row


@pytest.mark.parametrize(
    "task,config", [("noised_language_modeling", "ptb_medium"), ("noised_translation", "iwslt15")]
)
def test_readme_training_commands_match_the_tables_configs(task, config):
    """Every flag of the README's training command has the value of the table's config, and the
    README's scheme and gamma_0 are one of the table's rows."""
    from omegaconf import OmegaConf
    from test_sweeps import compose

    readme = flag_values(
        training_command(readme_commands(README.read_text(encoding="utf-8")), task)
    )
    cfg = compose(config)
    for flag, value in readme.items():
        if flag in WHERE:
            continue
        assert flag in CONFIG_KEYS, f"README's {task} command has {flag}: add it to CONFIG_KEYS"
        have = OmegaConf.select(cfg, CONFIG_KEYS[flag])
        want = True if value is None else value  # a switch
        assert same_value(str(have) if have is not True else True, want), (
            f"{flag}: README {value}, recipes/config/{config} {CONFIG_KEYS[flag]}={have}"
        )
    rows = [
        dict(kv.split(":") for kv in r.split(","))
        for r in re.findall(r"\{([^}]*)\}", cfg.hydra.sweeper.params.task)
    ]
    assert any(
        r["noise_scheme"] == readme["--noise-scheme"]
        and same_value(r["noise_gamma"], readme["--noise-gamma"])
        for r in rows
    ), f"README's {task} row is none of recipes/config/{config}'s rows {rows}"


@pytest.mark.slow
def test_readme_commands_run(tmp_path):
    start = time.perf_counter()
    timings = run_readme(documented(), tmp_path)
    # the training commands wrote the checkpoints the evaluation commands read
    assert list(tmp_path.glob("checkpoints/*/checkpoint_best.pt"))
    assert (tmp_path / "data-bin" / "ptb" / "dict.txt").exists()
    print(
        f"README commands ran in {time.perf_counter() - start:.1f} s:",
        ", ".join(f"{c} {s:.1f} s" for c, s in timings),
    )


@pytest.mark.slow
def test_a_broken_readme_command_fails(tmp_path):
    """A flag renamed in the README's LM training command (a README out of date with the code)
    makes run_readme fail and name the command."""
    text = README.read_text(encoding="utf-8")
    lm = training_command(readme_commands(text), "noised_language_modeling")
    assert "--stateful-bptt" in lm
    # plant the bug in the fairseq-train block only (fairseq-eval-lm takes the flag too)
    blocks = [
        b
        for b in bash_blocks(text)
        if "fairseq-train" in b and "noised_language_modeling" in b and "..." not in b
    ]
    assert len(blocks) == 1
    train_part = blocks[0][blocks[0].index("fairseq-train") :]
    broken_part = train_part.replace("--stateful-bptt", "--stateful-tbptt", 1)
    broken = text.replace(blocks[0], blocks[0].replace(train_part, broken_part, 1), 1)
    assert broken != text
    # run only the broken section's commands (preprocess, then the broken train fails)
    section = "\n".join(f"```bash\n{b}```" for b in bash_blocks(broken) if "--stateful-tbptt" in b)
    with pytest.raises(AssertionError, match=r"README command failed: fairseq-train data-bin/ptb"):
        run_readme(section, tmp_path)
