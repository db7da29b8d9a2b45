"""A sweep row read from its folder (fairseq_noising/sweep/record.py, progress.py, tables.py,
callback.py): the facts come from the files Hydra, fairseq and the row write, built here by hand.

Oracles: Hydra's files and fairseq's checkpoint and json log as written here (a checkpoint is the
dict fairseq saves, with the keys fairseq writes), the paper's halving rule applied by hand to the
validations written here, fairseq's stop tests applied by hand, /proc (a process that has exited),
omegaconf's own error for a bad value of a fairseq dataclass, and fairseq's index writer.
"""

import json
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from row_kit import CWD, HALVED, LOG, checkpoint, train, valid, write_row

from fairseq_noising.sweep import callback, evaluate, page, record
from fairseq_noising.sweep.page import markdown, tables


def test_the_halvings_and_the_protocols_end_come_from_the_scheduler_and_the_checkpoint(tmp_path):
    # the last decision is missing from the saved state (fairseq saves before it hands the
    # scheduler the loss): its value is extra_state's val_loss, replayed
    saved = checkpoint(HALVED, epoch=6, val_loss=4.3, updates=50, seconds=321.5)
    row = record.read(str(write_row(tmp_path / "kn", log=LOG, saved=saved)))
    t = row["training"]
    assert (t["halvings"], t["max_halvings"], t["stop"], t["lr"]) == (2, 2, "halvings", 0.0)
    assert record.ending(dict(row, status="ended")) == "protocol"
    assert t["epochs"] == 5 and t["epochs_done"] == 5.0 and t["training_seconds"] == 321.5
    assert t["valid_ppl"] == {"1": 32.0, "2": 16.0, "3": 22.6, "4": 18.4, "5": 19.7}
    assert t["train_ppl"]["5"] == 16.5 and t["resume_at"] == "the end of epoch 5"
    assert t["train_lr"] == {"1": 1.0, "2": 1.0, "3": 0.5, "4": 0.25, "5": 0.25}
    # saved inside epoch 5 (no val_loss to replay): two halvings, the protocol goes on
    inside = checkpoint(HALVED, epoch=5, inside=3, updates=43)
    row = record.read(str(write_row(tmp_path / "kn2", log=LOG[:-2], saved=inside)))
    assert (row["training"]["halvings"], row["training"]["stop"]) == (2, None)
    assert row["training"]["resume_at"] == "update 43 inside epoch 5"


def test_between_epochs_a_row_is_at_the_rate_its_next_epoch_trains_at(tmp_path):
    # epochs 1 to 3 trained at lr 1; epoch 3's validation (4.5, worse than 4.0) halves the rate
    # (by hand, the plateau rule): saved at the end of epoch 3, the row is at lr 0.5, 1 halving
    log = [valid(1, 5.0, 32.0), train(1, 60.0, 1, 10), valid(2, 4.0, 16.0), train(2, 20.0, 1, 20)]
    log += [valid(3, 4.5, 22.6), train(3, 18.0, 1, 30)]
    saved = checkpoint(HALVED[:2], epoch=4, val_loss=4.5, updates=30)
    row = record.read(str(write_row(tmp_path / "kn", log=log, saved=saved)))
    t = row["training"]
    assert (t["halvings"], t["lr"], t["train_lr"]["3"]) == (1, 0.5, 1.0)
    assert record.position_words(row) == "after epoch 3, lr 0.5, 1 of 2 halvings"
    # one that improves leaves the rate as it was
    saved = checkpoint(HALVED[:2], epoch=4, val_loss=3.9, updates=30)
    log[-2] = valid(3, 3.9, 15.0)
    row = record.read(str(write_row(tmp_path / "kn2", log=log, saved=saved)))
    assert record.position_words(row) == "after epoch 3, lr 1, 0 of 2 halvings"
    # with --halving-start-epoch 4, epoch 3's worse validation halves nothing
    log[-2], saved = valid(3, 4.5, 22.6), checkpoint(HALVED[:2], epoch=4, val_loss=4.5, updates=30)
    row = record.read(str(write_row(tmp_path / "kn3", log=log, saved=saved, start_epoch=4)))
    assert record.position_words(row) == "after epoch 3, lr 1, 0 of 2 halvings"


def test_a_rows_epoch_time_is_the_median_of_fairseqs_per_epoch_training_times(tmp_path):
    log = [valid(1, 5.0, 32.0), train(1, 60.0, 1, 10, seconds=300)]
    log += [valid(2, 4.0, 16.0), train(2, 20.0, 1, 20, seconds=500)]
    log += [valid(3, 3.9, 15.0), train(3, 18.0, 1, 30, seconds=420)]
    row = record.read(str(write_row(tmp_path / "kn", log=log)))
    assert row["training"]["epoch_seconds"] == 420  # of 300, 500, 420
    row = record.read(str(write_row(tmp_path / "kn2", log=log[:4])))
    assert row["training"]["epoch_seconds"] == 400  # of 300, 500: their mean
    row = record.read(str(write_row(tmp_path / "none", log=LOG)))  # no train_wall logged
    assert row["training"]["epoch_seconds"] is None


def test_an_epoch_whose_summary_a_kill_lost_still_counts(tmp_path):
    # killed between epoch 1's checkpoint and fairseq's summary of it, then resumed from that
    # checkpoint: epoch 1 has its validation but no train record, and epochs 2 to 5 follow
    resumed = [r for r in LOG if r != LOG[1]]
    t = record.read(str(write_row(tmp_path / "a", log=resumed)))["training"]
    assert t["epochs"] == 5 and t["valid_ppl"]["1"] == 32.0 and "1" not in t["train_ppl"]
    # still dead: the checkpoint saved at the end of epoch 1 says that epoch ended
    saved = checkpoint(HALVED[:1], epoch=2, val_loss=5.0, updates=10)
    t = record.read(str(write_row(tmp_path / "b", log=LOG[:1], saved=saved)))["training"]
    assert (t["epochs"], t["valid_ppl"], t["resume_at"]) == (1, {"1": 32.0}, "the end of epoch 1")
    # a validation inside epoch 1 (saved inside it) ends nothing
    inside = checkpoint([], epoch=1, inside=4, updates=4)
    t = record.read(str(write_row(tmp_path / "c", log=LOG[:1], saved=inside)))["training"]
    assert (t["epochs"], t["valid_ppl"], t["last_valid_ppl"]) == (0, {}, 32.0)


@pytest.mark.parametrize(
    "settings, saved, expected",
    [
        # a fixed rate for an epoch count: the last epoch is a cap, not the protocol's end
        (dict(scheduler="fixed", max_epoch=5), checkpoint([], epoch=6), "max_epoch"),
        # patience 2: 5, 4, then 4.5 and 4.2 without beating 4 (fairseq's count reaches 2)
        (dict(scheduler="fixed", patience=2), checkpoint([], epoch=6), "patience"),
        # patience 3 is not reached by those: no fact says why it ended
        (dict(scheduler="fixed", patience=3), checkpoint([], epoch=6), None),
        (dict(scheduler="fixed", hours=0.05), checkpoint([], epoch=6, seconds=180.5), "time"),
        (dict(scheduler="fixed", hours=0.05), checkpoint([], epoch=6, seconds=179.0), None),
        (dict(scheduler="fixed", max_update=50), checkpoint([], epoch=6, updates=50), "max_update"),
        # paper_halving cut short by --max-epoch: a cap
        (dict(max_epoch=5), checkpoint(HALVED[:2], epoch=6, val_loss=4.5), "max_epoch"),
    ],
)
def test_how_a_training_stopped_follows_fairseqs_stop_tests(tmp_path, settings, saved, expected):
    log = LOG[:4] + [valid(3, 4.5, 22.6), valid(4, 4.2, 18.4)] + LOG[9:]
    row = record.read(str(write_row(tmp_path / "r", log=log, saved=saved, **settings)))
    assert row["training"]["stop"] == expected
    ending = record.ending(dict(row, status="ended"))
    assert ending == {None: "ended", "patience": "protocol"}.get(expected, expected)


def test_a_row_reads_its_config_from_hydras_files_and_its_commands_are_relative(tmp_path):
    table = {"title": "T", "paper": {"kn": [1, 2]}}
    row = record.read(str(write_row(tmp_path / "kn", log=LOG[:2], table=table)))
    assert row["config"]["checkpoint"]["save_dir"] == str(tmp_path / "kn")
    assert row["config"]["common"]["user_dir"] == f"{CWD}/fairseq_noising"
    assert (row["key"], row["gamma"], row["seed"], row["cwd"]) == ("kn", 0.2, 2, CWD)
    assert (row["config_name"], row["config_dir"], row["table"]) == (
        "ptb_small",
        f"{CWD}/recipes/config",
        table,
    )
    assert shlex.split(row["command"]) == [
        "fairseq-hydra-train", "-m", "--config-dir", "recipes/config", "--config-name",
        "ptb_small", "hydra.sweep.dir=runs/x", "task={noise_scheme:kn,noise_gamma:0.2}",
        "task.data=data-bin/ptb",
    ]  # fmt: skip
    # a folder whose Hydra files are gone is a row that says so
    (tmp_path / "kn" / ".hydra" / "config.yaml").unlink()
    record.write(str(tmp_path / "kn"), {"format": 2, "status": "ended"})
    broken = record.read(str(tmp_path / "kn"))
    assert broken["status"] == "unreadable" and ".hydra holds no readable config" in broken["error"]


def test_a_row_whose_process_is_gone_is_stopped(tmp_path, monkeypatch):
    run_dir = write_row(tmp_path / "kn", log=LOG[:2])
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone = {"host": record.socket.gethostname(), "pid": int(done.stdout), "pid_start": "1"}
    cases = [
        (record.this_process(), "training"),  # this test's own process runs
        (gone, "stopped"),  # exited
        (dict(record.this_process(), pid_start="1"), "stopped"),  # the pid is another's now
        (dict(gone, host="elsewhere"), "training"),  # this machine cannot tell
    ]
    for proc, status in cases:
        record.write(str(run_dir), {"format": 2, "status": "training", "process": proc})
        assert record.read(str(run_dir))["status"] == status, proc
    # a SLURM job: squeue lists it while it runs
    squeue = tmp_path / "bin" / "squeue"
    squeue.parent.mkdir()
    for listed, status in (("RUNNING", "training"), ("", "stopped")):
        squeue.write_text(f"#!/bin/sh\necho '{listed}'\n")
        squeue.chmod(0o755)
        monkeypatch.setenv("PATH", f"{squeue.parent}:{os.environ['PATH']}")
        record.write(
            str(run_dir), {"format": 2, "status": "training", "process": {"slurm_job": "7"}}
        )
        assert record.read(str(run_dir))["status"] == status


def test_a_rows_process_names_the_cpus_model_as_lscpu_does(tmp_path):
    """The oracle: util-linux's lscpu (its own reading of the machine's CPU model)."""
    lscpu = shutil.which("lscpu")
    out = subprocess.run([lscpu], capture_output=True, text=True).stdout if lscpu else ""
    fields = dict(ln.split(":", 1) for ln in out.splitlines() if ":" in ln)
    model = fields.get("Model name", "").strip()
    if not model or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no lscpu model name or no /proc/cpuinfo on this machine")
    assert record.this_process()["cpu"] == " ".join(model.split())
    # a machine whose cpuinfo has no model (aarch64) or none at all: None
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    assert record.cpu_model(str(tmp_path / "cpuinfo")) is None
    assert record.cpu_model(str(tmp_path / "missing")) is None


def test_a_pages_copy_shows_the_row_as_it_was_when_paged(tmp_path):
    """A page written while a row trained keeps "training" for that row after its process is
    gone (here, or on another machine that reads the committed copy); the row itself is stopped."""
    from fairseq_noising.sweep.page import render

    run_dir = write_row(tmp_path / "sweep" / "kn", log=LOG[:2])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = {"host": record.socket.gethostname(), "pid": child.pid}
        proc["pid_start"] = record._start_time(child.pid)
        record.write(str(run_dir), {"format": 2, "status": "training", "process": proc})
        row = record.read(str(run_dir))
        assert row["status"] == "training"
        render._copy_rows([row], str(tmp_path / "page-rows"))
    finally:
        child.kill()
        child.wait()
    assert record.read(str(run_dir))["status"] == "stopped"
    copy = record.read(str(tmp_path / "page-rows" / "kn"))
    assert copy["status"] == "training" and copy["training"]["epochs"] == row["training"]["epochs"]


def test_a_pages_figures_are_those_its_copied_records_give(tmp_path, monkeypatch):
    """A reader of a committed page has the records beside it, not the sweep: each table of the
    page is what they give, read back and rendered again (as tests/test_results_pages.py does),
    for a row whose checkpoint says more than its progress file (killed between the save at the
    end of epoch 1 and fairseq's summary of it) and a row that trains on while the page is
    written (its validation of epoch 3 lands between the page's reading and its copy)."""
    from row_kit import as_event

    from fairseq_noising.sweep.page import render

    sweep = tmp_path / "sweep"
    kn = write_row(sweep / "kn", log=LOG[:1], saved=checkpoint(HALVED[:1], epoch=2, val_loss=5.0))
    on = write_row(sweep / "none", log=LOG[:4], scheme="none", gamma=0)
    for run_dir in (kn, on):
        record.write(
            str(run_dir), {"format": 2, "status": "training", "process": record.this_process()}
        )
    copy_rows = render._copy_rows

    def trains_on(rows, rows_dir):
        with open(on / "progress.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"time": 2000.0, **as_event(*LOG[4])}) + "\n")
        copy_rows(rows, rows_dir)

    monkeypatch.setattr(render, "_copy_rows", trains_on)
    monkeypatch.setattr(tables, "on_its_data", lambda spec, rows: True)
    out = page.write(str(sweep), str(tmp_path / "page.md"))
    text = open(out, encoding="utf-8").read()
    monkeypatch.setattr(render, "_copy_rows", copy_rows)
    rows = record.read_sweep(str(tmp_path / "page-rows"))
    spec = tables.spec(rows[0].get("table"), rows[0]["config_name"])
    again = render.render(rows, spec, "Paper validation" in text, str(tmp_path / "again.md"), "x")

    def table_lines(t):
        return [line for line in t.split("\n") if line.startswith("|")]

    assert table_lines(again) == table_lines(text)
    shown = {line.split("|")[1].strip(): line for line in table_lines(text)}
    assert "after epoch 1" in shown["kn"]  # the checkpoint's end of epoch 1
    assert "22.60*" in shown["none"]  # the validation copied, not the one read before


def test_a_row_whose_checkpoints_are_gone_still_says_how_its_training_ended(tmp_path, monkeypatch):
    """The halvings, the end of the protocol, the time budget and the training time live in
    checkpoint_last.pt; the callback keeps them in the record when the training returns, so a
    row whose checkpoints were deleted (or left out of an archive) pages the same."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    monkeypatch.setattr(callback.RowCallback, "_record_evaluation", lambda *a: None)  # no model
    # the protocol's end, worked out by hand above; and a fixed rate stopped by 0.05 h
    protocol = write_row(
        tmp_path / "kn",
        log=LOG,
        saved=checkpoint(HALVED, epoch=6, val_loss=4.3, updates=50, seconds=321.5),
    )
    timed = write_row(
        tmp_path / "none",
        scheduler="fixed",
        hours=0.05,
        log=LOG[:4],
        saved=checkpoint([], epoch=3, updates=20, seconds=180.5),
    )
    expected = {
        protocol: ((2, "halvings", 0.0, 321.5), "end of the protocol (epoch 5, all 2 halvings)"),
        timed: ((None, "time", 1.0, 180.5), "stopped by the time budget, "),
    }
    done = JobReturn()
    done.status = JobStatus.COMPLETED
    for run_dir, (facts, words) in expected.items():
        record.write(str(run_dir), {"format": 2, "status": "training"})
        job = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(run_dir)}}})
        callback.RowCallback()._record_ending(str(run_dir), done, job)
        # while the checkpoint is there, it is what tells (a record may be older than it)
        rec = record.read_record(str(run_dir))
        record.write(str(run_dir), dict(rec, at_end=dict(rec["at_end"], training_seconds=1.0)))
        assert record.read(str(run_dir))["training"]["training_seconds"] == facts[3]
        record.write(str(run_dir), rec)
        (run_dir / "checkpoint_last.pt").unlink()
        row = record.read(str(run_dir))
        t = row["training"]
        assert (t["halvings"], t["stop"], t["lr"], t["training_seconds"]) == facts
        assert markdown.ending_words(row).startswith(words)
        # a page's copy of a record whose at_end lacks the training time (an older version's):
        # the facts the page read when it copied the row fill it
        older = {k: v for k, v in rec["at_end"].items() if k != "training_seconds"}
        record.write(str(run_dir), dict(rec, at_end=older, as_paged=dict(rec["at_end"])))
        assert record.read(str(run_dir))["training"]["training_seconds"] == facts[3]
        record.write(str(run_dir), rec)
        # a record without them (written before the training returned) cannot tell
        rec = record.read_record(str(run_dir))
        record.write(str(run_dir), {k: rec[k] for k in rec if k != "at_end"})
        assert record.read(str(run_dir))["training"]["stop"] is None


def test_a_rows_record_says_whether_an_mps_daemon_serves_it(tmp_path, monkeypatch):
    """CUDA finds an MPS daemon through CUDA_MPS_PIPE_DIRECTORY (recipes/mps.py sets it for the
    rows it starts): the record the row's callback writes when the row starts says so."""
    from omegaconf import OmegaConf

    for name, pipe in (("alone", None), ("shared", str(tmp_path / "mps" / "pipe"))):
        if pipe is None:
            monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
        else:
            monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", pipe)
        job = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path / name)}}})
        callback.RowCallback().on_job_start(job)
        assert record.read_record(str(tmp_path / name))["mps"] is (pipe is not None)


def test_a_bad_value_fails_with_one_line_naming_the_field_the_value_and_what_was_expected():
    from fairseq.dataclass.utils import merge_with_parent
    from omegaconf import OmegaConf

    import fairseq_noising.tasks  # noqa: F401
    from fairseq_noising.tasks.noised_language_modeling import NoisedLanguageModelingConfig

    config = OmegaConf.create({"task": {"noise_scheme": "bogus"}, "common": {"seed": 1}})
    with pytest.raises(Exception) as raised:
        merge_with_parent(NoisedLanguageModelingConfig(), config.task)
    line = callback.one_line(raised.value, config)
    assert "\n" not in line
    assert line.startswith(
        "ValidationError: task.noise_scheme: Invalid value 'bogus', expected one of ["
    )
    assert "kn" in line.split("expected one of", 1)[1]


def test_a_plugin_error_names_its_flags_as_the_rows_fields_and_keeps_its_other_words():
    from omegaconf import OmegaConf

    from fairseq_noising.errors import NoisingError

    config = OmegaConf.create(
        {"task": {"precision": "bf16", "noise_gamma": 0.2}, "common": {"bf16": False, "cpu": True}}
    )
    error = NoisingError(
        "--precision bf16: this cpu lacks bf16 units; --noise-gamma --no-such-flag and bf16 stay"
    )
    assert callback.one_line(error, config) == (
        "fairseq-noising: error: task.precision bf16: this cpu lacks bf16 units; "
        "task.noise_gamma --no-such-flag and bf16 stay"
    )


def _write_pages(sweep_dir, n, errors, trace):
    """Writes the page ``n`` times; each render notes when it starts and ends in ``trace``."""
    import time

    render = page.render.render

    def traced(*args, **kwargs):
        with open(trace, "a") as f:
            f.write(f"start {os.getpid()}\n")
        time.sleep(0.02)  # a page that takes a while: writers would overlap here
        text = render(*args, **kwargs)
        with open(trace, "a") as f:
            f.write(f"end {os.getpid()}\n")
        return text

    page.render.render = traced
    try:
        for _ in range(n):
            page.write(sweep_dir)
    except Exception as e:  # what the test looks for
        errors.put(f"{type(e).__name__}: {e}")


def test_rows_that_end_together_write_one_page_at_a_time(tmp_path):
    sweep = tmp_path / "sweep"
    for name in ("none", "kn"):
        run_dir = write_row(sweep / name, log=LOG[:2])
        record.write(str(run_dir), {"format": 2, "status": "failed", "error": "x"})
    ctx = multiprocessing.get_context("fork")
    errors, trace = ctx.Queue(), tmp_path / "trace"
    writers = [
        ctx.Process(target=_write_pages, args=(str(sweep), 5, errors, trace)) for _ in range(3)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == [] and all(w.exitcode == 0 for w in writers)
    events = trace.read_text().split()
    # 15 renders, none starting before the one before it ended
    assert events[0::4] == ["start"] * 15 and events[2::4] == ["end"] * 15
    assert events[1::4] == events[3::4]  # each render ends in the process that started it
    assert sorted(os.listdir(sweep / "results-rows")) == ["kn", "none"]
    assert sorted(p.name for p in sweep.iterdir() if ".part" in p.name or ".old" in p.name) == []
    text = (sweep / "results.md").read_text()
    assert text.count("\n| kn | 0.2 |") == 1 and text.count("\n| none | 0.2 |") == 1


def test_the_training_sentences_of_the_data_come_from_fairseqs_index(tmp_path):
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    data = tmp_path / "data"
    data.mkdir()
    builder = MMapIndexedDatasetBuilder(str(data / "train.bin"))
    for n in (3, 1, 4):
        builder.add_item(torch.arange(n))
    builder.finalize(str(data / "train.idx"))
    cfg = {"task": {"data": "data"}}
    assert tables.train_sentences(cfg, str(tmp_path)) == 3
    assert tables.train_sentences({"task": {"data": "elsewhere"}}, str(tmp_path)) is None
    table = tables.spec(
        {"title": "T", "data": {"train_sentences": 3}, "paper": {"kn": [1, 2]}}, "x"
    )
    rows = [{"config": cfg, "cwd": str(tmp_path)}]
    assert tables.on_its_data(table, rows)
    assert not tables.on_its_data(dict(table, data={"train_sentences": 4}), rows)


def test_an_unknown_table_is_an_error(tmp_path):
    (tmp_path / "ptb_small.yaml").write_text("defaults: []\n")
    with pytest.raises(
        Exception, match=r"--table ptb-small: no ptb-small.yaml in .* \(tables: ptb_small\)"
    ):
        tables.from_config("ptb-small", str(tmp_path))


def test_figure_1_marks_every_point_and_counts_whole_epochs():
    from fairseq_noising.analysis import plots

    fig = plots.curves_figure({"none": ({1: 300.0}, {1: 250.0}), "kn": ({1: 320.0}, {1: 240.0})})
    ax = fig.axes[0]
    assert len(ax.lines) == 4 and all(
        line.get_marker() not in (None, "None", "") for line in ax.lines
    )
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks == [1.0]
    assert ax.get_xlim() == (0.5, 1.5)


# ------------------------------------------------------------------ a real sweep


def _progress(*runs):
    """A progress file: each run a (from, records) pair, records as fairseq's json log has
    them (row_kit), ended with an end unless from is 'killed'."""
    from row_kit import as_event

    out = []
    for at, recs, ended in runs:
        out.append({"tag": "start", "from": at})
        out += [as_event(tag, rec) for tag, rec in recs]
        if ended:
            out.append({"tag": "end", "status": "completed"})
    return out


def test_fairseqs_patience_counts_afresh_in_each_process(tmp_path):
    """fairseq keeps its patience count in the process: a resumed row counts from zero again.
    Patience 2 over 5, 4, 4.5 (one without improving), then a resume and 4.6, 4.7: the second
    process's best is 4.6 and it has one validation without improving, so patience has not run
    out; read as one sequence, 4.5, 4.6, 4.7 would make three."""
    first = [valid(1, 5.0, 32.0), valid(2, 4.0, 16.0), valid(3, 4.5, 22.6)]
    at = {"epoch": 3, "updates": 0, "inside": False, "where": "the end of epoch 3"}
    second = [valid(4, 4.6, 24.3), valid(5, 4.7, 26.0)]
    progress = _progress((None, first, False), (at, second, True))
    saved = checkpoint([], epoch=6)
    row = write_row(tmp_path / "r", scheduler="fixed", patience=2, saved=saved, progress=progress)
    assert record.read(str(row))["training"]["stop"] is None
    # the same five validations in one process: patience ran out
    one = write_row(
        tmp_path / "one",
        scheduler="fixed",
        patience=2,
        saved=saved,
        progress=_progress((None, first + second, True)),
    )
    assert record.read(str(one))["training"]["stop"] == "patience"


def test_a_resume_drops_what_the_stopped_process_did_after_its_last_save(tmp_path):
    # killed after it validated and summed up epoch 3 (30 updates) but before it saved; resumed
    # from the end of epoch 2 (20 updates), the second process is 5 updates into epoch 3 again:
    # epoch 3 has not ended, and its figures of the first process are gone
    killed = LOG[:4] + [("valid", dict(valid(3, 4.9, 30.0)[1], valid_num_updates="30"))]
    killed += [("train", {**LOG[5][1], "train_num_updates": "30"})]
    at = {"epoch": 2, "updates": 20, "inside": False, "where": "the end of epoch 2"}
    again = [("train_inner", {"epoch": 3, "update": 2.5, "lr": "0.5", "num_updates": "25"})]
    progress = _progress((None, killed, False), (at, again, False))
    t = record.read(str(write_row(tmp_path / "r", progress=progress)))["training"]
    assert t["valid_ppl"] == {"1": 32.0, "2": 16.0} and t["epochs"] == 2
    assert "3" not in t["train_ppl"] and t["epochs_done"] == 2.5 and t["last_valid_ppl"] == 16.0
    runs = t["runs"]
    assert (runs["count"], runs["resumed"], runs["restarts"], len(runs["stops"])) == (2, 1, 0, 2)
    assert runs["list"][0]["ended"] is None and runs["list"][1]["from"] == at
    # started from scratch again (its checkpoints gone): the first process's records are dropped
    progress = _progress((None, killed, False), (None, LOG[:2], True))
    t = record.read(str(write_row(tmp_path / "s", progress=progress)))["training"]
    assert t["valid_ppl"] == {"1": 32.0} and t["runs"]["restarts"] == 1
    assert t["runs"]["list"][0]["dropped"] is True
    # wall time: from the first start to the last record (row_kit: a minute between records)
    assert t["runs"]["wall_seconds"] == 60.0 * (len(progress) - 1)


def test_a_row_just_started_is_in_its_first_epoch(tmp_path):
    # started, no progress record yet (fairseq logs every log_interval updates)
    row = record.read(str(write_row(tmp_path / "r", progress=_progress((None, [], False)))))
    assert (
        record.position_words(row) == "epoch 1, before its first progress record, 0 of 2 halvings"
    )
    # its first progress record: a fraction of epoch 1
    first = [("train_inner", {"epoch": 1, "update": 0.25, "lr": "1", "num_updates": "3"})]
    row = record.read(str(write_row(tmp_path / "s", progress=_progress((None, first, False)))))
    assert record.position_words(row) == "epoch 1 (25% of it), lr 1, 0 of 2 halvings"


def test_a_row_without_a_progress_file_says_so(tmp_path):
    run_dir = write_row(tmp_path / "r", log=LOG)
    (run_dir / "progress.jsonl").unlink()
    t = record.read(str(run_dir))["training"]
    assert t["recorded"] is False and t["epochs"] == 0 and t["valid_ppl"] == {}
    assert markdown.runs_cell({"training": t}) == "no record"


@pytest.mark.parametrize(
    "command_line, params, expected",
    [
        (["task={noise_scheme:kn,noise_gama:0.2},{noise_scheme:none,noise_gamma:0}"], {},
         "row task={noise_scheme:kn,noise_gama:0.2}: the task has no field 'noise_gama'"),
        (["task.noise_gama=0.3"], {}, "row task.noise_gama=0.3: the task has no field 'noise_gama'"),
        ([], {"task": "{noise_scheme:kn,noise_gamma:0.2},{noise_shceme:kn}"},
         "row task={noise_shceme:kn}: the task has no field 'noise_shceme'"),
        (["task={noise_scheme:kn,noise_gamma:0.2}", "common.seed=1,2", "~task.data"], {}, None),
    ],
)  # fmt: skip
def test_a_misspelled_row_field_is_one_line_before_any_row_trains(command_line, params, expected):
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "task": {"_name": "noised_language_modeling", "noise_scheme": "none"},
            "hydra": {"overrides": {"task": command_line}, "sweeper": {"params": params}},
        }
    )
    line = callback.unknown_task_field(config)
    if expected is None:
        assert line is None
        return
    assert line.startswith(f"fairseq-noising: error: {expected} (its fields: ")
    assert "noise_gamma, noise_scheme" in line and "\n" not in line


def test_where_a_row_is_names_a_save_inside_an_epoch_no_progress_record_reached():
    # stopped by --max-update at update 30 of the first epoch, before fairseq's first progress
    # record of it (every 100 updates): the checkpoint says where it is
    t = {"epochs_done": 0.0, "resume_at": "update 30 inside epoch 1", "lr": 1.0}
    t.update(halvings=0, max_halvings=8)
    assert (
        record.position_words({"training": t}) == "update 30 inside epoch 1, lr 1, 0 of 8 halvings"
    )
    t.update(epochs_done=3.0, resume_at="the end of epoch 3")
    assert record.position_words({"training": t}) == "after epoch 3, lr 1, 0 of 8 halvings"


def test_a_failed_evaluation_writes_its_reason_into_the_record(tmp_path):
    """The evaluation records why it failed; the callback takes the reason from the record, not
    from the last line of eval.log."""
    run_dir = write_row(tmp_path / "kn", log=LOG[:2])
    record.write(str(run_dir), {"format": 2, "status": "ended"})
    callback.RowCallback()._record_evaluation(str(run_dir), record.read_record(str(run_dir)))
    rec = record.read_record(str(run_dir))
    missing = f"{run_dir}/checkpoint_best.pt is missing: the training saved no best checkpoint"
    assert rec["evaluation_error"] == missing
    assert (rec["status"], rec["error"]) == ("failed", f"evaluation: {missing}")
    assert "fairseq-noise-eval" in (run_dir / "eval.log").read_text()  # its output, for people


def test_an_evaluation_recorded_without_its_chosen_model_gets_it_and_keeps_its_figures(tmp_path):
    """A record of an earlier version holds the figures of an unchanged checkpoint_best.pt but
    not which validation chose it: evaluating again adds it from the checkpoint (the epoch that
    fairseq's iterator state names) and keeps the figures; nothing is evaluated again."""
    run_dir = write_row(tmp_path / "none", scheme="none", gamma=0, log=LOG[:2])
    torch.save(
        checkpoint([], epoch=50, val_loss=4.4, updates=66400), run_dir / "checkpoint_best.pt"
    )
    figures = {
        "valid_ppl": 84.13,
        "test_ppl": 80.28,
        "commands": ["fairseq-eval-lm data-bin/ptb"],
        "checkpoint_mtime": os.path.getmtime(run_dir / "checkpoint_best.pt"),
    }
    record.write(str(run_dir), {"format": 2, "status": "ended", "evaluation": dict(figures)})
    got = evaluate.evaluate_row(str(run_dir))
    saved = record.read_record(str(run_dir))["evaluation"]
    assert got == saved
    assert saved["chosen"] == {
        "updates": 66400, "loss": 4.4, "epoch": 49, "inside": False, "where": "the end of epoch 49"
    }  # fmt: skip
    assert {k: saved[k] for k in figures} == figures
    assert markdown.model_cell({"evaluation": saved}) == "epoch 49"


@pytest.mark.parametrize(
    "command_line, params, expected",
    [
        (["task={noise_scheme:kn,noise_gamma:0.2},{noise_scheme:kn,noise_gamma:1.5}"], {},
         ["row task={noise_scheme:kn,noise_gamma:1.5}: task.noise_gamma must lie in [0, 1], got 1.5"]),
        (["task.noise_scheme=bogus,kn"], {},
         ["row task.noise_scheme=bogus: task.noise_scheme: Invalid value 'bogus', expected one of "
          "[none, blank, uniform, unigram"]),
        ([], {"task": "{noise_scheme:kn,subword_sampling_alpha:-0.1}"},
         ["row task={noise_scheme:kn,subword_sampling_alpha:-0.1}: task.subword_sampling_alpha "
          "must be >= 0 (0: off; at most 1 for a BPE model), got -0.1"]),
        (["task={noise_scheme:kn,noise_gamma:0.2}", "task.precision=fp32,bf16", "common.seed=1,2"],
         {}, []),
        (["task={noise_scheme:kn,noise_gamma:0.2}", "task.precision=bf32"], {},
         ["row task={noise_scheme:kn,noise_gamma:0.2} task.precision=bf32: task.precision: "
          "Invalid value 'bf32', expected one of [fp32, bf16]"]),
    ],
)  # fmt: skip
def test_bad_row_values_are_one_line_each_before_any_row_trains(command_line, params, expected):
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "task": {"_name": "noised_translation", "noise_scheme": "none", "data": "???"},
            "hydra": {"overrides": {"task": command_line}, "sweeper": {"params": params}},
        }
    )
    lines = callback.bad_row_values(config)
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected):
        assert line.startswith(f"fairseq-noising: error: {start}"), line
        assert "\n" not in line


def test_a_process_started_after_the_row_ended_is_no_resume(tmp_path):
    """A row's command run again once its training ended (its log imported, which keeps the
    start) trains nothing: not a process of the row, and not in its wall time."""
    saved = checkpoint(HALVED, epoch=6, val_loss=4.3, updates=50, seconds=321.5)
    at = {"updates": 50, "where": "update 50"}
    progress = _progress((None, LOG, False), (at, [], False))
    t = record.read(str(write_row(tmp_path / "kn", progress=progress, saved=saved)))["training"]
    assert t["stop"] == "halvings"
    assert (t["runs"]["count"], t["runs"]["resumed"], t["runs"]["stops"]) == (1, 0, [])
    assert t["wall_seconds"] == 60.0 * (len(progress) - 2)
    # the same start while the row still trains is a process of its own
    inside = checkpoint(HALVED, epoch=5, inside=3, updates=43)
    t = record.read(str(write_row(tmp_path / "kn2", progress=progress, saved=inside)))["training"]
    assert t["stop"] is None and t["runs"]["count"] == 2


@pytest.mark.slow
def test_a_table_read_in_process_leaves_fairseq_able_to_set_up_a_task(ptb_tiny_bin):
    """Hydra keeps the version base of its first initialisation for the process: reading a
    table's config (the page writer) must leave fairseq's own hydra.experimental.initialize,
    which a version base above 1.1 refuses, working in the same process; Hydra's warning about
    that base is not shown to the page writer's user."""
    import warnings

    from conftest import REPO, TINY_LM, build_task, lm_train_argv

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert tables.from_config("ptb_small", str(REPO / "recipes" / "config"))["title"]
    assert [str(w.message) for w in shown if "version_base" in str(w.message)] == []
    task, _ = build_task(lm_train_argv(ptb_tiny_bin, "--batch-size", 5, model=TINY_LM))
    assert task.dictionary is not None
