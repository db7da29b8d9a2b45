"""bench/bench_concurrency.py (``python -m bench.bench_concurrency``): N fairseq-hydra-train runs
of one row of a PTB table side by side.

The slow test runs it on the CPU with ``--size small`` for N=1 and N=2 on the binarized PTB the
other tests share (``--data-bin``: binarizing again would double the test's time) and checks its
table and --json numbers against each other, the command against the table's config, and that
nothing it started is left. The fast tests check the command it builds, that it reads the
``train_inner`` lines of fairseq-hydra-train's log, and its refusals, which come before anything
runs.
"""

import json
import math
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import CLI_ENV, REPO, processes_naming, require_shared

from bench import bench_concurrency

COMMAND = [sys.executable, "-m", "bench.bench_concurrency"]  # run from the repository root

ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$")
# what each run sets besides the table's config: its row, no evaluation, the measurement's settings
PER_RUN = (
    "task=", "~hydra.callbacks.row", "common.user_dir=", "hydra.sweep.subdir=",
    "optimization.max_epoch=", "common.log_interval=",
)  # fmt: skip


@pytest.fixture
def short_tmp():
    """A folder with a short path for the benchmark's TMPDIR: its runs' sockets live below it,
    and the paths of pytest's own folders are too long for them."""
    folder = Path(tempfile.mkdtemp(prefix="bc-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_runs_side_by_side_on_the_cpu(tmp_path, short_tmp, ptb_bin):
    require_shared("ptb")
    tmp = short_tmp  # the benchmark's temporary folder goes here
    out = tmp_path / "figures.json"
    argv = ["--device", "cpu", "--size", "small", "--runs", "1,2"]
    argv += ["--seconds", "5", "--data-bin", str(ptb_bin), "--json", str(out)]
    proc = subprocess.Popen(
        COMMAND + argv,
        cwd=REPO,
        env={**CLI_ENV, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.terminate()  # on SIGTERM the benchmark stops its runs and removes its folder
        stdout, stderr = proc.communicate(timeout=60)
        pytest.fail(f"no result in 300 s:\n{stdout[-3000:]}{stderr[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert processes_naming(str(tmp)) == [], "processes of the benchmark are still running"
    assert list(tmp.iterdir()) == [], "the temporary folder was not removed"

    figures = json.loads(out.read_text())
    rows = figures["rows"]
    assert [row["runs"] for row in rows] == [1, 2]
    for row in rows:
        rates = row["per_run"]
        assert len(rates) == row["runs"] and min(rates) > 0
        assert row["sum"] == pytest.approx(math.fsum(rates), rel=1e-12)
        assert row["mean"] == pytest.approx(row["sum"] / row["runs"], rel=1e-12)
        assert row["min"] == min(rates)
        assert row["speedup"] == pytest.approx(row["sum"] / rows[0]["sum"], rel=1e-12)

    printed = [ROW.match(line) for line in stdout.splitlines()]
    printed = [[float(x) for x in m.groups()] for m in printed if m]
    expected = [[r["runs"], r["mean"], r["min"], r["sum"], r["speedup"]] for r in rows]
    assert printed == [[round(x, 2) for x in row] for row in expected], stdout

    # every run trains one row of the table's own config; only its row, folder and the
    # measurement's settings are added
    measured = shlex.split(figures["command"])
    assert Path(measured[0]).name == "fairseq-hydra-train"
    assert measured[1:5] == [
        "--config-dir",
        str(REPO / "recipes" / "config"),
        "--config-name",
        "ptb_small",
    ]
    assert measured[5] == f"task.data={ptb_bin}"
    rest = measured[6:]
    assert rest[-1].startswith("hydra.run.dir=") and rest[-2] == "common.cpu=true"
    assert [a for a in rest[:-2] if not a.startswith(PER_RUN)] == []
    assert "common.log_interval=1" in rest and "task={noise_scheme:none,noise_gamma:0}" in rest


@pytest.mark.slow
def test_ctrl_c_stops_every_run_and_removes_the_folder(short_tmp, ptb_bin):
    tmp = short_tmp
    argv = ["--device", "cpu", "--size", "small", "--runs", "2"]
    proc = subprocess.Popen(
        COMMAND + argv + ["--data-bin", str(ptb_bin)],
        cwd=REPO,
        env={**CLI_ENV, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a shell's foreground command gets it: a suite started in the background (`cmd &`)
        # has SIGINT ignored, and a child would inherit that and never see the Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for line in proc.stdout:  # the runs start right after this line
            if line.startswith("N=2: starting"):
                break
        deadline = time.monotonic() + 60
        while len(processes_naming(str(tmp))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(processes_naming(str(tmp))) >= 2, "the runs did not start"
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "interrupted" in stderr, stdout + stderr
    assert processes_naming(str(tmp)) == [], "processes of the benchmark are still running"
    assert list(tmp.iterdir()) == [], "the temporary folder was not removed"


def no_process(*args, **kwargs):
    raise AssertionError(f"a process was started: {args}")


def unread_data_bin(folder: Path) -> Path:
    """A --data-bin folder with the file names the benchmark checks for; nothing reads them
    before the refusals tested here."""
    folder.mkdir()
    for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx"):
        (folder / name).touch()
    return folder


def test_mps_on_the_cpu_is_refused_before_anything_runs(short_tmp, tmp_path, monkeypatch):
    data = unread_data_bin(tmp_path / "bin")
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(bench_concurrency.tempfile, "tempdir", str(short_tmp))
    with pytest.raises(SystemExit) as refused:
        bench_concurrency.main(["--mps", "--device", "cpu", "--data-bin", str(data)])
    message = str(refused.value)
    assert message.startswith("bench_concurrency.py: --mps needs a CUDA device")
    assert "\n" not in message
    assert list(short_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--runs", "1,x"], "--runs"),
        (["--runs", "0,2"], "--runs"),
        (["--seconds", "-5"], "--seconds"),
        (["--size", "noising_lstm_lm_small"], "--size"),
        (["--data-bin", "{tmp}"], "--data-bin"),
        (["--ptb-dir", "{tmp}"], "--ptb-dir"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(argv, named, tmp_path, capsys):
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    with pytest.raises(SystemExit) as refused:
        bench_concurrency.parse_args(argv)
    message = str(refused.value) if refused.value.code != 2 else capsys.readouterr().err
    error_lines = [line for line in message.splitlines() if "error" in line]
    assert len(error_lines) == 1 and named in error_lines[0], message


def test_a_temporary_folder_too_deep_for_the_runs_sockets_is_refused(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(bench_concurrency.tempfile, "tempdir", str(deep))
    argv = ["--device", "cpu", "--data-bin", str(unread_data_bin(tmp_path / "bin"))]
    with pytest.raises(SystemExit) as refused:
        bench_concurrency.main(argv)
    message = str(refused.value)
    assert "set TMPDIR to a shorter folder" in message and "\n" not in message
    assert list(deep.iterdir()) == []


@pytest.mark.parametrize("device, size", [("cpu", "small"), ("cuda", "large")])
def test_each_run_is_the_tables_config_with_the_measurements_overrides(device, size, tmp_path):
    data = unread_data_bin(tmp_path / "bin")
    args = bench_concurrency.parse_args(["--size", size, "--data-bin", str(data)])
    args.cache_dir = tmp_path / "cache"
    interval = 1 if device == "cpu" else 10
    cmd = bench_concurrency.training_command(args, device, interval)
    assert cmd == [
        str(Path(sys.executable).parent / "fairseq-hydra-train"),
        "--config-dir",
        str(REPO / "recipes" / "config"),
        "--config-name",
        f"ptb_{size}",
        f"task.data={data.resolve()}",
        "task={noise_scheme:none,noise_gamma:0}",
        "~hydra.callbacks.row",
        f"common.user_dir={REPO / 'fairseq_noising'}",
        "hydra.sweep.subdir=run",
        "optimization.max_epoch=100000",
        f"common.log_interval={interval}",
    ] + (["common.cpu=true"] if device == "cpu" else [])
    assert list(tmp_path.iterdir()) == [data]  # nothing binarized: --data-bin is read


def test_the_train_inner_lines_of_hydras_log_are_read(tmp_path):
    """fairseq-hydra-train's stdout carries its log with Hydra's prefix; the other lines (the
    epoch's summary, validation) name num_updates too and are not train_inner lines."""
    lines = [
        "[2026-11-25 01:53:53,100][fairseq_cli.train][INFO] - training on 1 devices (GPUs/TPUs)",
        "[2026-11-25 01:53:53,100][train_inner][INFO] - epoch 001:     10 / 1327 loss=9.1, "
        "ppl=549.3, wps=1200, ups=3.4, wpb=700, bsz=20, num_updates=10, lr=1, gnorm=2.1, wall=4",
        "[2026-11-25 01:53:56,100][valid][INFO] - epoch 001 | valid on 'valid' subset | "
        "loss 8 | num_updates 1327",
        "[2026-11-25 01:53:57,100][train_inner][INFO] - epoch 001:     20 / 1327 loss=8.8, "
        "num_updates=20, lr=1, wall=7",
        "[2026-11-25 01:53:58,100][train][INFO] - epoch 001 | loss 8.7 | num_updates 1327",
    ]
    script = f"import sys; sys.stdout.write({chr(10).join(lines) + chr(10)!r})"
    run = bench_concurrency.Run([sys.executable, "-c", script], tmp_path / "run", None)
    run.proc.wait(30)
    run.reader.join(30)
    run.log.close()
    assert run.updates == [10, 20] and len(run.times) == 2
    assert run.last()[1] == 20
    assert (tmp_path / "run" / "train.log").read_text().splitlines() == lines
