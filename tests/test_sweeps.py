"""Tables as Hydra sweeps (recipes/config, fairseq_noising/sweep): every config builds the model its
name says and sweeps exactly its table's rows (which rows on the command line replace), rows run in
one process keep their own best checkpoint, and real ``fairseq-hydra-train -m`` sweeps on PTB
slices record, evaluate and page their rows; a failed row leaves the others, a killed row resumes;
the same sweep runs on a one-node SLURM cluster (tests/slurm_kit.py).

Oracles: the paper's sizes and the tables' rows written out here, Hydra's own sweeper (the jobs it
makes of a config and a command line), fairseq's own files (``.hydra/overrides.yaml``, the
evaluation outputs ``valid.eval.log``, fairseq's "Loaded checkpoint" line), the flag check's line,
the test perplexity computed from the checkpoint (tests/score_kit.py).
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import CLI_ENV, PLUGIN_DIR, REPO, cli, lm_train_argv
from halving_kit import train_in_process
from omegaconf import OmegaConf
from score_kit import stateful_perplexity
from slurm_kit import slurm_cluster  # noqa: F401

CONFIGS = REPO / "recipes" / "config"
# (hidden units, layers, dropout) of each model the paper names, as the paper gives them
PAPER_SIZES = {
    "noising_lstm_lm_small": (200, 2, 0.0),
    "noising_lstm_lm_medium": (512, 2, 0.5),
    "noising_lstm_lm_large": (1500, 2, 0.65),
    "noising_lstm_iwslt_en_de": (512, 2, 0.2),
}
# each table's config and the model it trains: (architecture, (hidden, layers, dropout)); the
# sizes are the paper's unless the table says otherwise
TABLE_MODELS = {
    "ptb_small": ("noising_lstm_lm_small", PAPER_SIZES["noising_lstm_lm_small"]),
    "ptb_medium": ("noising_lstm_lm_medium", PAPER_SIZES["noising_lstm_lm_medium"]),
    "ptb_large": ("noising_lstm_lm_large", PAPER_SIZES["noising_lstm_lm_large"]),
    "quickstart": ("noising_lstm_lm_medium", PAPER_SIZES["noising_lstm_lm_medium"]),
    "text8": ("noising_lstm_lm_medium", (512, 2, 0.0)),  # Table 3: 512 units, no dropout
    "iwslt15": ("noising_lstm_iwslt_en_de", PAPER_SIZES["noising_lstm_iwslt_en_de"]),
    "multi30k": ("noising_lstm_iwslt_en_de", PAPER_SIZES["noising_lstm_iwslt_en_de"]),
    "multi30k_cpu": ("noising_lstm_iwslt_en_de", (256, 2, 0.2)),  # a CPU budget: 256 units
    "multi30k_spm_cpu": ("noising_lstm_iwslt_en_de", (256, 2, 0.2)),
}


def size_of(model):
    lstm = model.decoder.lstm
    return lstm.hidden_size, lstm.num_layers


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_a_size_named_alone_builds_that_size(name):
    """Hydra's model config names the size and nothing else (fairseq runs no architecture
    function for a config-built model): the size's own defaults must apply."""
    from fairseq.dataclass.utils import merge_with_parent
    from fairseq.models import MODEL_DATACLASS_REGISTRY

    import fairseq_noising.models  # noqa: F401  (registers the models)

    cfg = OmegaConf.create({"_name": name})
    hidden, layers, dropout = PAPER_SIZES[name]

    merged = merge_with_parent(MODEL_DATACLASS_REGISTRY[name](), cfg)
    assert (merged.hidden_size, merged.num_layers, merged.dropout) == (hidden, layers, dropout)
    model = _build(cfg)
    assert size_of(model) == (hidden, layers)
    assert model.decoder.dropout_out.p == dropout


def _build(model_cfg):
    from fairseq.data import Dictionary
    from fairseq.models import build_model

    d = Dictionary()
    for i in range(10):
        d.add_symbol(f"w{i}")
    task = type("Task", (), {"source_dictionary": d, "target_dictionary": d})()
    return build_model(model_cfg, task)


@pytest.mark.parametrize("name", ["noising_lstm_lm_small", "noising_lstm_lm_large"])
def test_the_arch_flag_builds_the_same_size(name):
    """fairseq-train --arch NAME: the Namespace and the config fairseq makes of it."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_noising.models  # noqa: F401  (--arch)
    import fairseq_noising.tasks  # noqa: F401  (--task)

    argv = lm_train_argv("data-bin", model=("--arch", name))
    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
    hidden, layers, dropout = PAPER_SIZES[name]
    assert (args.hidden_size, args.num_layers, args.dropout) == (hidden, layers, dropout)
    model = _build(convert_namespace_to_omegaconf(args).model)
    assert size_of(model) == (hidden, layers)
    assert model.decoder.dropout_out.p == dropout


def compose(config_name, *overrides):
    """The config ``fairseq-hydra-train --config-name config_name`` composes (fairseq's schema of
    that name registered first, as its hydra_init does)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    hydra_init(config_name)
    # version_base 1.1, as fairseq-hydra-train has it (a later one would refuse fairseq's use of
    # hydra.experimental in convert_namespace_to_omegaconf for the rest of the process)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.1"):
        return hydra_compose(config_name, overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("config_name", sorted(TABLE_MODELS))
def test_every_table_config_builds_the_model_its_name_says(config_name):
    import fairseq_noising.models  # noqa: F401  (the configs' model)
    import fairseq_noising.optim  # noqa: F401  (their scheduler)
    import fairseq_noising.tasks  # noqa: F401  (their task)

    cfg = compose(config_name)
    name, (hidden, layers, dropout) = TABLE_MODELS[config_name]
    assert cfg.model._name == name
    model = _build(OmegaConf.create(OmegaConf.to_container(cfg.model)))
    assert size_of(model) == (hidden, layers)
    assert model.decoder.dropout_out.p == dropout
    assert cfg.hydra.callbacks.row._target_ == "fairseq_noising.sweep.callback.RowCallback"
    assert cfg.hydra.launcher._target_.endswith(".JoblibLauncher")  # rows side by side
    # the plugin is the folder Python imports it from, in the process that trains the row
    assert OmegaConf.to_container(cfg.common)["user_dir"] == "${fairseq_noising.user_dir:}"
    import fairseq_noising.sweep  # noqa: F401  (the resolver, as the callback's import has it)

    assert cfg.common.user_dir == str(PLUGIN_DIR)
    # validations at epoch ends only: checkpoint_best.pt, the model a row evaluates, is the best
    # end-of-epoch model, as the paper picks it
    assert cfg.checkpoint.save_interval_updates == 0 and cfg.dataset.validate_interval_updates == 0
    assert cfg.checkpoint.save_interval == 1 and cfg.dataset.validate_interval == 1


def test_the_lm_tables_run_the_papers_protocol():
    cfg = compose("ptb_medium")
    assert cfg.optimization.sentence_avg and list(cfg.optimization.lr) == [1.0]
    assert cfg.optimization.clip_norm == 5.0 and cfg.optimization.stop_min_lr == 0
    assert cfg.lr_scheduler._name == "paper_halving" and cfg.lr_scheduler.halvings == 8
    assert cfg.dataset.batch_size == 20 and cfg.task.tokens_per_sample == 35
    assert cfg.task.stateful_bptt and cfg.dataset.num_workers == 0
    translation = compose("iwslt15")
    assert translation.lr_scheduler.halving_threshold == 0.01
    assert translation.checkpoint.best_checkpoint_metric == "nll_loss"
    assert translation.dataset.batch_size == 128
    import fairseq_noising.models  # noqa: F401  (the model)

    model = _build(OmegaConf.create(OmegaConf.to_container(translation.model)))
    assert model.encoder.reverse_source  # the paper reads the source backwards


# ------------------------------------------------------------------ the rows of a sweep

# each table's rows, as the paper's tables have them: (scheme, gamma_0) for a language model,
# (scheme, side, gamma_0) for translation; one none row whatever the gamma grid
LM_ROWS = [("none", 0), ("blank", 0.1), ("blank", 0.2), ("unigram", 0.1), ("unigram", 0.2)]
LM_ROWS += [("kn", 0.2), ("kn", 0.4)]
MT_ROWS = [("none", "both", 0)]
MT_ROWS += [(s, "both", g) for s in ("blank", "unigram", "kn") for g in (0.1, 0.2)]
MT_ROWS += [("kn", side, g) for side in ("source", "target") for g in (0.1, 0.2)]
TABLE_ROWS = {
    "ptb_small": LM_ROWS,
    "ptb_medium": LM_ROWS,
    "ptb_large": LM_ROWS,
    "text8": LM_ROWS,
    "quickstart": [("none", 0), ("kn", 0.2)],
    "iwslt15": MT_ROWS,
    "multi30k": MT_ROWS,
    "multi30k_cpu": [("none", "both", 0)]
    + [("kn", side, 0.2) for side in ("both", "source", "target")],
    "multi30k_transformer": [("none", "both", 0), ("kn", "both", 0.1), ("kn", "both", 0.2)],
    # subword sampling's alpha ends a row that samples
    "multi30k_spm_cpu": [("none", "both", 0), ("none", "both", 0, 0.1)],
}


def _sampling(task) -> tuple:
    alpha = task.get("subword_sampling_alpha")
    return (alpha,) if alpha else ()


def sweep_jobs(config_name, *overrides):
    """The jobs of ``fairseq-hydra-train -m --config-name config_name overrides``, as Hydra's
    sweeper makes them (each the list of its overrides): the config's ``hydra.sweeper.params``,
    then the command line's other overrides (a key given twice: the command line's wins),
    multiplied out. ``hydra...`` overrides change the config the params are read from."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydra = [o for o in overrides if o.lstrip("~+").startswith("hydra")]
    cfg = compose(config_name, *hydra)
    params = [f"{k}={v}" for k, v in (cfg.hydra.sweeper.params or {}).items()]
    arguments = [o for o in overrides if o not in hydra]
    parsed = OverridesParser.create().parse_overrides(params + arguments)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def row_of(config_name, job):
    """The row a job trains, read from the config Hydra composes for it."""
    task = compose(config_name, *job).task
    if "noise_side" in task:
        return (task.noise_scheme, task.noise_side, task.noise_gamma) + _sampling(task)
    return (task.noise_scheme, task.noise_gamma) + _sampling(task)


@pytest.mark.parametrize("config_name", sorted(TABLE_ROWS))
def test_every_table_config_sweeps_exactly_its_rows(config_name):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    jobs = sweep_jobs(config_name)
    parser = OverridesParser.create()
    rows = []
    for job in jobs:
        (row,) = parser.parse_overrides(job)  # one override a job: task={...}
        assert row.key_or_group == "task"
        fields = row.value()
        rows.append(
            tuple(fields[k] for k in ("noise_scheme", "noise_side", "noise_gamma") if k in fields)
            + _sampling(fields)
        )
    assert rows == TABLE_ROWS[config_name]
    # what a job's override gives is the row itself: the first and last, composed
    assert [row_of(config_name, job) for job in (jobs[0], jobs[-1])] == [rows[0], rows[-1]]


@pytest.mark.parametrize(
    "config_name,override,rows",
    [
        (
            "ptb_medium",
            "task={noise_scheme:none,noise_gamma:0},{noise_scheme:kn,noise_gamma:0.2}",
            [("none", 0), ("kn", 0.2)],
        ),
        (
            "multi30k_cpu",
            "task={noise_scheme:kn,noise_side:target,noise_gamma:0.3}",
            [("kn", "target", 0.3)],
        ),
    ],
)
def test_rows_on_the_command_line_replace_the_configs(config_name, override, rows):
    jobs = sweep_jobs(config_name, override)
    assert [row_of(config_name, job) for job in jobs] == rows


def test_a_gamma_grid_of_one_scheme_replaces_the_configs_rows_once_they_are_cleared():
    """README: ``~hydra.sweeper.params.task task.noise_scheme=kn task.noise_gamma=0.1,0.2,0.3``.
    Without the first, the grid would multiply the config's 7 rows (21 jobs, 7 to a folder)."""
    grid = ["task.noise_scheme=kn", "task.noise_gamma=0.1,0.2,0.3"]
    jobs = sweep_jobs("ptb_small", "~hydra.sweeper.params.task", *grid)
    assert [row_of("ptb_small", job) for job in jobs] == [("kn", 0.1), ("kn", 0.2), ("kn", 0.3)]
    assert len(sweep_jobs("ptb_small", *grid)) == 7 * 3


@pytest.mark.slow
def test_rows_in_one_process_each_write_their_own_best_checkpoint(ptb_tiny_bin, tmp_path, caplog):
    """The basic launcher (and a reused joblib worker) trains rows one after another in one
    process. fairseq keeps its running bests for the process's life; the row callback starts them
    afresh where each row starts, as the launcher calls it: a second row worse than the first
    must still write its checkpoint_best.pt, and a third that improves at every epoch must not be
    stopped by --patience (fairseq's early stop) for the first rows' best."""
    from fairseq_noising.sweep.callback import RowCallback

    rows = {"first": (1.0, 5), "second": (1e-9, 5), "third": (1.0, 1)}  # lr, --patience
    for name, (lr, patience) in rows.items():  # the second row does not learn at all
        job = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path / name)}}})
        RowCallback().on_job_start(job)
        argv = lm_train_argv(
            ptb_tiny_bin,
            "--arch", "noising_lstm_lm_small", "--hidden-size", 16, "--batch-size", 20,
            "--required-batch-size-multiple", 1, "--max-epoch", 2, "--save-dir", tmp_path / name,
            "--no-epoch-checkpoints", "--seed", 1, "--patience", patience, scheme="none", lr=lr,
        )  # fmt: skip
        log = train_in_process(argv, caplog)
        if name == "second":
            assert "Saved checkpoint" in log and (tmp_path / name / "checkpoint_best.pt").is_file()
    assert "begin training epoch 2" in log and "early stop" not in log


# ------------------------------------------------------------------ real sweeps


def sweep_argv(config, data, sweep_dir, *overrides):
    return [
        cli("fairseq-hydra-train"), "-m", "--config-dir", CONFIGS, "--config-name", config,
        f"task.data={data}", f"hydra.sweep.dir={sweep_dir}", "++model.hidden_size=16",
        "optimization.max_epoch=2", "common.log_interval=5", *overrides,
    ]  # fmt: skip


def run_sweep(argv, check=True, timeout=900, env=CLI_ENV):
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"sweep exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def record_of(run_dir: Path):
    """The row as the page reads it (its record, Hydra's files, its checkpoint and json log)."""
    from fairseq_noising.sweep import record

    return record.read(str(run_dir))


def md_rows(text, first_cell):
    """The cells of the Markdown table rows whose first cell is ``first_cell``."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            out.append(cells)
    return out


FAILED = "fairseq-noising: error: --stateful-bptt: num_rows and block_size must be positive"

# the tests that read the one sweep of three rows below run in one pytest-xdist worker
THREE_ROWS = pytest.mark.xdist_group("three_rows")


@pytest.fixture(scope="module")
def three_rows(ptb_tiny_bin, tmp_path_factory):
    """A user's sweep of three rows on the tiny slice, two epochs each, on the tables' launcher
    (rows side by side): none and kn train through; blank's values pass the checks before
    training, but its blocks of 0 tokens fail it (only the data's loading refuses them). The
    sweep folder and the finished process; read, never changed, by the tests."""
    sweep_dir = tmp_path_factory.mktemp("three_rows") / "sweep"
    rows = "task={noise_scheme:none,noise_gamma:0},{noise_scheme:kn,noise_gamma:0.2},{noise_scheme:blank,noise_gamma:0.2,tokens_per_sample:0}"
    proc = run_sweep(sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, rows), check=False)
    return sweep_dir, proc


@pytest.mark.slow
@THREE_ROWS
def test_a_sweep_records_evaluates_and_pages_its_rows_and_a_failed_row_stops_no_other(
    three_rows, ptb_tiny_bin, tmp_path
):
    sweep_dir, proc = three_rows
    assert proc.returncode != 0  # the sweep says a row failed, in one line, no traceback
    failed = record_of(sweep_dir / "blank-g0.2-s1")
    assert failed["status"] == "failed"
    assert failed["error"] == FAILED
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"fairseq-noising: error: 1 of 3 rows failed: blank-g0.2-s1 ({FAILED.removeprefix('fairseq-noising: error: ')}); "
        f"every row: {sweep_dir}/results.md"
    )
    page = (sweep_dir / "results.md").read_text()
    for name, key in (("none-g0-s1", "none"), ("kn-g0.2-s1", "kn")):  # ... the others ran through
        run_dir = sweep_dir / name
        rec = record_of(run_dir)
        assert rec["status"] == "ended" and rec["key"] == key
        # the row's config is the one Hydra wrote, and it names the row's scheme
        assert rec["config"]["task"]["noise_scheme"] == key
        assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").task.noise_gamma == rec["gamma"]
        # the evaluation: the best checkpoint's perplexity, every token with its whole left
        # context (score_kit), at full precision
        for split in ("valid", "test"):
            expected = stateful_perplexity(run_dir / "checkpoint_best.pt", ptb_tiny_bin, split)
            assert rec["evaluation"][f"{split}_ppl"] == pytest.approx(expected, rel=1e-5)
        assert rec["training"]["epochs"] == 2 and rec["training"]["stop"] == "max_epoch"
        every = md_rows(page, name)
        assert every and every[0][2] == f"{rec['evaluation']['valid_ppl']:.2f}"
        assert "capped by --max-epoch" in every[0][-1]
        # the checkpoint's facts outlive it: the record kept them when the training returned
        # (the row copied without it: the sweep's folder stays as it is for the other tests)
        copy = tmp_path / name
        shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoint_last.pt"))
        gone = record_of(copy)["training"]
        assert gone["training_seconds"] == rec["training"]["training_seconds"] > 0
        assert gone["resume_at"] == rec["training"]["resume_at"] == "the end of epoch 2"
    label = md_rows(page, "bigram Kneser-Ney")[0]
    kn = record_of(sweep_dir / "kn-g0.2-s1")["evaluation"]
    assert label[1:4] == ["0.2", f"{kn['valid_ppl']:.2f}†", f"{kn['test_ppl']:.2f}†"]
    failed_cells = md_rows(page, "blank-g0.2-s1")[0]
    assert failed_cells[-1] == f"FAILED ({FAILED})"
    assert not md_rows(page, "blank")  # the failed row is no line of the main table
    assert (sweep_dir / "results-curves.png").stat().st_size > 1000
    for name in ("none-g0-s1", "kn-g0.2-s1", "blank-g0.2-s1"):  # every row's files beside the page
        kept = sweep_dir / "results-rows" / name
        assert {"row.json", "progress.jsonl", "hydra_train.log"} <= {p.name for p in kept.iterdir()}
        assert (kept / ".hydra" / "config.yaml").read_text() == (
            sweep_dir / name / ".hydra" / "config.yaml"
        ).read_text()


@pytest.mark.slow
@THREE_ROWS
def test_a_failed_rows_sweep_names_each_row_on_the_console_and_its_page_commands_run(three_rows):
    """The three-row sweep, as its user sees it: the bad row fails with one line naming what
    was wrong, no traceback, every console line of training names its row; the page's commands
    run as written from the folder the sweep ran in (the repository root) and give the page's
    figures."""
    sweep_dir, done = three_rows
    console = done.stdout + done.stderr
    assert f"row blank-g0.2-s1: failed: {FAILED}" in console
    assert "Traceback" not in console
    progress = [line for line in done.stdout.splitlines() if "][train_inner][" in line]
    named = [re.search(r"\]\[([^]]+)\]\[train_inner\]\[", line) for line in progress]
    assert {m[1] if m else None for m in named} == {"none-g0-s1", "kn-g0.2-s1"}
    text = (sweep_dir / "results.md").read_text()
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert f"FAILED ({FAILED})" in rows["blank-g0.2-s1"]
    assert "capped by --max-epoch, after epoch 2" in rows["none-g0-s1"]
    commands = [line[4:] for line in text.splitlines() if line.startswith("    ")]
    assert all(not word.startswith("/") for c in commands for word in shlex.split(c))
    # the evaluation commands of none's row, run as written from the repository root, print
    # the figures
    evaluation = record_of(sweep_dir / "none-g0-s1")["evaluation"]
    evaluations = [c for c in commands if c.startswith("fairseq-eval-lm") and "none-g0-s1" in c]
    assert len(evaluations) == 2
    for split, command in zip(("valid", "test"), evaluations):
        words = shlex.split(command)
        out = subprocess.run(
            [cli(words[0]), *words[1:]], cwd=REPO, env=CLI_ENV, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        printed = float(out.stderr.rsplit("Perplexity: ", 1)[1].split()[0])
        assert printed == pytest.approx(evaluation[f"{split}_ppl"], abs=0.006)
    assert f"| none | 0 | {evaluation['valid_ppl']:.2f}† | {evaluation['test_ppl']:.2f}† |" in text


@pytest.mark.slow
def test_a_sweep_trains_with_the_plugin_python_imports_from_any_folder(ptb_tiny_bin, tmp_path):
    # an installed copy of the plugin (a wheel, not the checkout), the sweep run from a folder
    # that holds no fairseq_noising: each row's fairseq loads the copy Python imported
    site = tmp_path / "site"
    shutil.copytree(
        PLUGIN_DIR, site / "fairseq_noising", ignore=shutil.ignore_patterns("__pycache__")
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**CLI_ENV, "PYTHONPATH": os.pathsep.join([str(site), CLI_ENV.get("PYTHONPATH", "")])}
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, "task={noise_scheme:none,noise_gamma:0}",
                      "optimization.max_epoch=1")  # fmt: skip
    proc = subprocess.run(
        [str(a) for a in argv], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert record_of(sweep_dir / "none-g0-s1")["status"] == "ended"
    log = (sweep_dir / "none-g0-s1" / "hydra_train.log").read_text()
    assert f"'user_dir': '{site / 'fairseq_noising'}'" in log


@pytest.mark.slow
def test_a_killed_row_resumes_from_its_last_checkpoint(ptb_small_bin, tmp_path):
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv(
        "ptb_small", ptb_small_bin, sweep_dir, "task={noise_scheme:kn,noise_gamma:0.2}",
        "optimization.max_epoch=3", "hydra/launcher=basic",
    )  # fmt: skip
    run_dir = sweep_dir / "kn-g0.2-s1"
    proc = subprocess.Popen(
        [str(a) for a in argv], cwd=REPO, env=CLI_ENV, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log, deadline = run_dir / "hydra_train.log", time.time() + 600
    while time.time() < deadline and "(epoch 1 @" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)  # until fairseq says the first epoch's checkpoints are written
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = record_of(run_dir)  # no ending recorded, and its process is gone
    assert killed["status"] == "stopped"
    assert killed["training"]["resume_at"] == "the end of epoch 1"
    run_sweep(argv)
    resumed = log.read_text().split("Loaded checkpoint")
    assert len(resumed) == 2 and re.match(r" .*checkpoint_last\.pt \(epoch [12] @", resumed[1])
    rec = record_of(run_dir)
    assert rec["status"] == "ended" and rec["training"]["epochs"] == 3
    # the progress file keeps both processes: the first stopped, the second resumed from its
    # checkpoint and ended; the validations are those of the training the checkpoints continue
    runs = rec["training"]["runs"]
    assert (runs["count"], runs["resumed"], runs["restarts"]) == (2, 1, 0)
    first, second = runs["list"]
    assert first["ended"] is None and second["ended"] is not None
    assert second["from"]["where"] == killed["training"]["resume_at"] == "the end of epoch 1"
    assert sorted(rec["training"]["valid_ppl"]) == ["1", "2", "3"]
    page = (sweep_dir / "results.md").read_text()
    assert md_rows(page, "kn-g0.2-s1")[0][-2] == "2 (1 resumed)"
    assert re.search(r"^- kn-g0\.2-s1: stopped .* resumed .* from the end of epoch", page, re.M)


@pytest.mark.slow
def test_a_command_for_an_ended_row_changes_nothing_of_it(ptb_tiny_bin, tmp_path):
    """fairseq's --max-update test runs after an update: run again, a capped row would train
    one more. The row's callback has fairseq train nothing, and the row's files stay as they
    were."""
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, "task={noise_scheme:none,noise_gamma:0}",
                      "optimization.max_update=15", "hydra/launcher=basic")  # fmt: skip
    run_sweep(argv)
    run_dir = sweep_dir / "none-g0-s1"
    kept = ("checkpoint_last.pt", "checkpoint_best.pt", "row.json", "progress.jsonl")
    before = {n: (run_dir / n).read_bytes() for n in kept}
    assert record_of(run_dir)["training"]["stop"] == "max_update"
    again = run_sweep(argv)
    assert {n: (run_dir / n).read_bytes() for n in kept} == before
    said = again.stdout + again.stderr
    assert "row none-g0-s1: capped by --max-update, " in said and ": nothing to train" in said
    # a larger cap trains on, to the end of epoch 2 (--max-epoch 2, 10 updates an epoch)
    run_sweep([*argv, "optimization.max_update=25"])
    state = torch.load(run_dir / "checkpoint_last.pt", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 20
    assert record_of(run_dir)["training"]["stop"] == "max_epoch"


@pytest.mark.slow
@THREE_ROWS
def test_a_simple_log_records_the_same_facts_as_a_json_log(three_rows, ptb_tiny_bin, tmp_path):
    """The record reads the progress file, which fairseq's progress bars fill whatever the log
    format: a row logged in fairseq's simple format (alone, on the basic launcher) records what
    the same row logged in json (the tables' format, the three-row sweep's kn row) records."""
    facts, json_dir = {}, three_rows[0] / "kn-g0.2-s1"
    simple_dir = tmp_path / "simple" / "kn-g0.2-s1"
    argv = sweep_argv("ptb_small", ptb_tiny_bin, simple_dir.parent, "task={noise_scheme:kn,noise_gamma:0.2}",
                      "common.log_format=simple", "hydra/launcher=basic")  # fmt: skip
    run_sweep(argv)
    for fmt, run_dir in (("json", json_dir), ("simple", simple_dir)):
        log = (run_dir / "hydra_train.log").read_text()
        assert ('"valid_ppl": ' in log) == (fmt == "json"), log[-2000:]  # the format it logged in
        t = record_of(run_dir)["training"]
        assert t["recorded"] is True and t["epochs"] == 2
        facts[fmt] = {k: t[k] for k in ("valid_ppl", "train_ppl", "train_lr", "halvings", "stop")}
    assert facts["simple"] == facts["json"]


@pytest.mark.slow
def test_a_sweep_runs_on_a_slurm_cluster(slurm_cluster, ptb_tiny_bin, tmp_path):  # noqa: F811
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv(
        "ptb_small", ptb_tiny_bin, sweep_dir,
        "task={noise_scheme:none,noise_gamma:0},{noise_scheme:kn,noise_gamma:0.2}",
        "optimization.max_epoch=1", "hydra/launcher=submitit_slurm",
        f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=20",
    )  # fmt: skip
    proc = subprocess.run(
        [str(a) for a in argv], cwd=REPO, env={**CLI_ENV, **slurm_cluster.env},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("none-g0-s1", "kn-g0.2-s1"):
        rec = record_of(sweep_dir / name)
        assert rec["status"] == "ended" and "hydra/launcher=submitit_slurm" in rec["command"]
        assert rec["process"]["slurm_job"]  # the job that ran it, which squeue no longer lists
        # evaluated where SLURM ran it: the best checkpoint's test perplexity, every token
        # with its whole left context (score_kit)
        expected = stateful_perplexity(
            sweep_dir / name / "checkpoint_best.pt", ptb_tiny_bin, "test"
        )
        assert rec["evaluation"]["test_ppl"] == pytest.approx(expected, rel=1e-5, abs=0.006)
    assert list((sweep_dir / ".submitit").iterdir())  # the rows went through SLURM
    page = (sweep_dir / "results.md").read_text()
    assert md_rows(page, "none") and md_rows(page, "bigram Kneser-Ney")


@pytest.mark.slow
def test_a_misspelled_row_field_stops_the_sweep_with_one_line_before_any_row(
    ptb_tiny_bin, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    rows = "task={noise_scheme:kn,noise_gama:0.2},{noise_scheme:none,noise_gamma:0}"
    proc = run_sweep(sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, rows), check=False)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "fairseq-noising: error: row task={noise_scheme:kn,noise_gama:0.2}: the task has no "
        "field 'noise_gama' (its fields: "
    )
    assert "+task" not in proc.stderr  # not Hydra's advice
    assert not sweep_dir.exists() or not [p for p in sweep_dir.iterdir() if p.is_dir()]


@pytest.mark.slow
def test_bad_row_values_stop_the_sweep_with_one_line_each_before_any_row(ptb_tiny_bin, tmp_path):
    sweep_dir = tmp_path / "sweep"
    rows = "task={noise_scheme:bogus},{noise_scheme:kn,noise_gamma:1.5},{noise_scheme:none,noise_gamma:0}"
    proc = run_sweep(sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, rows), check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()[-2:]
    assert lines[0].startswith(
        "fairseq-noising: error: row task={noise_scheme:bogus}: task.noise_scheme: Invalid value "
        "'bogus', expected one of [none, blank, uniform, unigram"
    )
    assert lines[1] == (
        "fairseq-noising: error: row task={noise_scheme:kn,noise_gamma:1.5}: task.noise_gamma "
        "must lie in [0, 1], got 1.5"
    )
    assert "Traceback" not in proc.stderr
    assert not sweep_dir.exists() or not [p for p in sweep_dir.iterdir() if p.is_dir()]


@pytest.mark.slow
def test_a_bf16_row_has_its_own_folder_record_and_line_beside_the_fp32_row(
    ptb_tiny_bin, tmp_path, bf16_cpu
):
    sweep_dir = tmp_path / "sweep"
    rows = ["task={noise_scheme:none,noise_gamma:0}", "task.precision=fp32,bf16"]
    # one after the other in one process (the basic launcher): the second row's precision is
    # its own, not the first's
    one = ["optimization.max_epoch=1", "hydra/launcher=basic"]
    run_sweep(sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, *rows, *one), env=bf16_cpu)
    fp32, bf16 = record_of(sweep_dir / "none-g0-s1"), record_of(sweep_dir / "none-g0-s1-bf16")
    assert (fp32["precision"], fp32["key"]) == ("fp32", "none")
    assert (bf16["precision"], bf16["key"]) == ("bf16", "none@bf16")
    assert "task.precision=bf16" in bf16["command"]
    assert fp32["evaluation"]["valid_ppl"] != bf16["evaluation"]["valid_ppl"]
    page = (sweep_dir / "results.md").read_text()
    assert md_rows(page, "none, bf16")[0][2] == f"{bf16['evaluation']['valid_ppl']:.2f}†"
    assert [r[2] for r in md_rows(page, "none-g0-s1-bf16")] == ["bf16"]


@pytest.mark.slow
def test_one_row_without_m_and_a_translation_sweep_without_references_stop_in_one_line(
    multi30k_small_bin, tmp_path
):
    argv = sweep_argv("multi30k_cpu", multi30k_small_bin, tmp_path / "sweep")
    alone = run_sweep([a for a in argv if a != "-m"] + [f"hydra.run.dir={tmp_path}/run"], False)
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    assert alone.stderr.strip().splitlines()[-1] == (
        "fairseq-noising: error: the tables' configs run every row as a sweep job, which records, "
        "evaluates and pages it: add -m (fairseq-hydra-train -m ...), for one row as well"
    )
    swept = run_sweep(argv, check=False)
    assert swept.returncode == 1 and "Traceback" not in swept.stderr
    assert (
        swept.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "fairseq-noising: error: hydra.callbacks.row.reference is not set: the rows' BLEU needs "
        )
    )
    assert not (tmp_path / "sweep").exists()
