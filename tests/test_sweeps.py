"""Tables as Hydra sweeps (recipes/config, fairseq_noising/sweep): every config builds the model its
name says, rows run in one process keep their own best checkpoint, and real ``fairseq-hydra-train
-m`` sweeps on PTB slices record, evaluate and page their rows; a failed row leaves the others, a
killed row resumes; the same sweep runs on a one-node SLURM cluster (tests/slurm_kit.py).

Oracles: the paper's sizes written out here, fairseq's own files (``.hydra/overrides.yaml``, the
evaluation outputs ``valid.eval.log``, fairseq's "Loaded checkpoint" line), the flag check's line.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CLI_ENV, REPO, cli, lm_train_argv
from halving_kit import train_in_process
from omegaconf import OmegaConf
from slurm_kit import slurm_cluster  # noqa: F401

CONFIGS = REPO / "recipes" / "config"
# (hidden units, layers, dropout) of each model the paper names, as the paper gives them
PAPER_SIZES = {
    "noising_lstm_lm_small": (200, 2, 0.0),
    "noising_lstm_lm_medium": (512, 2, 0.5),
    "noising_lstm_lm_large": (1500, 2, 0.65),
    "noising_lstm_iwslt_en_de": (512, 2, 0.2),
}
# each table's config and the model it trains: (name, hidden, layers, dropout)
TABLE_MODELS = {
    "ptb_small": ("noising_lstm_lm_small", 200, 2, 0.0),
    "ptb_medium": ("noising_lstm_lm_medium", 512, 2, 0.5),
    "ptb_large": ("noising_lstm_lm_large", 1500, 2, 0.65),
    "quickstart": ("noising_lstm_lm_medium", 512, 2, 0.5),
    "text8": ("noising_lstm_lm_medium", 512, 2, 0.0),  # Table 3: no dropout
    "iwslt15": ("noising_lstm_iwslt_en_de", 512, 2, 0.2),
    "multi30k": ("noising_lstm_iwslt_en_de", 512, 2, 0.2),
    "multi30k_cpu": ("noising_lstm_iwslt_en_de", 256, 2, 0.2),
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
    name, hidden, layers, dropout = TABLE_MODELS[config_name]
    assert cfg.model._name == name
    model = _build(OmegaConf.create(OmegaConf.to_container(cfg.model)))
    assert size_of(model) == (hidden, layers)
    assert model.decoder.dropout_out.p == dropout
    assert cfg.hydra.callbacks.row._target_ == "fairseq_noising.sweep.callback.RowCallback"
    user_dir = OmegaConf.to_container(cfg.common)["user_dir"]  # resolved where the sweep runs
    assert user_dir == "${hydra:runtime.cwd}/fairseq_noising"


def test_the_lm_tables_run_the_papers_protocol():
    cfg = compose("ptb_medium")
    assert cfg.optimization.sentence_avg and list(cfg.optimization.lr) == [1.0]
    assert cfg.optimization.clip_norm == 5.0 and cfg.optimization.stop_min_lr == 0
    assert cfg.lr_scheduler._name == "paper_halving" and cfg.lr_scheduler.halvings == 8
    assert cfg.dataset.batch_size == 20 and cfg.task.tokens_per_sample == 35
    assert cfg.task.stateful_bptt and cfg.dataset.num_workers == 0
    rows = cfg.hydra.sweeper.params.task
    assert rows.count("noise_scheme:none") == 1  # one none row, whatever the gamma grid
    translation = compose("iwslt15")
    assert translation.lr_scheduler.halving_threshold == 0.01
    assert translation.checkpoint.best_checkpoint_metric == "nll_loss"
    assert translation.dataset.batch_size == 128 and translation.model.reverse_source


@pytest.mark.slow
def test_rows_in_one_process_each_write_their_own_best_checkpoint(ptb_tiny_bin, tmp_path, caplog):
    """The basic launcher (and a reused joblib worker) trains rows one after another in one
    process. fairseq keeps its running bests for the process's life: a second row worse than the
    first must still write its checkpoint_best.pt, and a third that improves at every epoch must
    not be stopped by --patience (fairseq's early stop) for the first rows' best."""
    rows = {"first": (1.0, 5), "second": (1e-9, 5), "third": (1.0, 1)}  # lr, --patience
    for name, (lr, patience) in rows.items():  # the second row does not learn at all
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
        f"task.data={data}", f"hydra.sweep.dir={sweep_dir}", "model.hidden_size=16",
        "optimization.max_epoch=2", "common.log_interval=5", *overrides,
    ]  # fmt: skip


def run_sweep(argv, check=True, timeout=900):
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=REPO,
        env=CLI_ENV,
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
    import json

    return json.loads((run_dir / "row.json").read_text())


def md_rows(text, first_cell):
    """The cells of the Markdown table rows whose first cell is ``first_cell``."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            out.append(cells)
    return out


@pytest.mark.slow
def test_a_sweep_records_evaluates_and_pages_its_rows_and_a_failed_row_stops_no_other(
    ptb_tiny_bin, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    rows = "task={noise_scheme:none,noise_gamma:0},{noise_scheme:kn,noise_gamma:0.2},{noise_scheme:kn,noise_gamma:1.5}"
    proc = run_sweep(sweep_argv("ptb_small", ptb_tiny_bin, sweep_dir, rows), check=False)
    assert proc.returncode != 0  # the sweep says a row failed ...
    failed = record_of(sweep_dir / "kn-g1.5")
    assert failed["status"] == "failed"
    assert "--noise-gamma must lie in [0, 1], got 1.5" in failed["error"]
    page = (sweep_dir / "results.md").read_text()
    for name, key in (("none-g0", "none"), ("kn-g0.2", "kn")):  # ... and the others ran through
        run_dir = sweep_dir / name
        rec = record_of(run_dir)
        assert rec["status"] == "ended" and rec["key"] == key
        assert (run_dir / "checkpoint_best.pt").is_file()
        # the record is fairseq's: its overrides and its evaluation outputs
        overrides = OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")
        assert rec["overrides"] == list(overrides)
        for split in ("valid", "test"):
            text = (run_dir / f"{split}.eval.log").read_text()
            ppl = float(re.findall(r"Perplexity: ([0-9.]+)", text)[-1])
            assert rec["evaluation"][f"{split}_ppl"] == ppl
        assert rec["training"]["epochs"] == 2 and rec["training"]["stop"] is None
        every = md_rows(page, name)
        assert every and every[0][2] == f"{rec['evaluation']['valid_ppl']:.2f}"
        assert "stopped by --max-epoch" in every[0][-1]
    label = md_rows(page, "bigram Kneser-Ney")[0]
    kn = record_of(sweep_dir / "kn-g0.2")["evaluation"]
    assert label[1:4] == ["0.2", f"{kn['valid_ppl']:.2f}†", f"{kn['test_ppl']:.2f}†"]
    assert "FAILED" in md_rows(page, "kn-g1.5")[0][-1]
    assert (sweep_dir / "results-curves.png").stat().st_size > 1000
    assert len(list((sweep_dir / "results-logs").glob("*.train.log"))) == 3


@pytest.mark.slow
def test_a_killed_row_resumes_from_its_last_checkpoint(ptb_small_bin, tmp_path):
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv(
        "ptb_small", ptb_small_bin, sweep_dir, "task={noise_scheme:kn,noise_gamma:0.2}",
        "optimization.max_epoch=3", "hydra/launcher=basic",
    )  # fmt: skip
    run_dir = sweep_dir / "kn-g0.2"
    proc = subprocess.Popen(
        [str(a) for a in argv], cwd=REPO, env=CLI_ENV, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log, deadline = run_dir / "hydra_train.log", time.time() + 600
    while time.time() < deadline and "(epoch 1 @" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)  # until fairseq says the first epoch's checkpoints are written
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert record_of(run_dir)["status"] == "training"  # killed: no ending recorded
    run_sweep(argv)
    resumed = log.read_text().split("Loaded checkpoint")
    assert len(resumed) == 2 and re.match(r" .*checkpoint_last\.pt \(epoch [12] @", resumed[1])
    rec = record_of(run_dir)
    assert rec["status"] == "ended" and rec["training"]["epochs"] == 3


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
    for name in ("none-g0", "kn-g0.2"):
        rec = record_of(sweep_dir / name)
        assert rec["status"] == "ended" and rec["evaluation"]["test_ppl"] > 1
        assert "hydra/launcher=submitit_slurm" in rec["command"]
    assert list((sweep_dir / ".submitit").iterdir())  # the rows went through SLURM
    page = (sweep_dir / "results.md").read_text()
    assert md_rows(page, "none") and md_rows(page, "bigram Kneser-Ney")
