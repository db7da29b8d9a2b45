"""recipes/rows.py, recipes/row_status.py and recipes/mps.py: the queued steps of a recipe run side
by side (JOBS at a time, each after the steps it reads from), a time budget turned into fairseq's
--stop-time-hours, status lines read from the logs alone, Ctrl-C and SIGTERM, and the CUDA MPS
daemon, tested on the CPU with a stand-in nvidia-cuda-mps-control that records how it was called."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from recipe_kit import RECIPES, mps, row_status, rows, run_queue, steps, train_log

# a training that takes a while: records when it ran, then leaves checkpoints
SLOW_TRAIN = textwrap.dedent(
    """
    import os, sys, time
    save = sys.argv[sys.argv.index("--save-dir") + 1]
    open(os.path.join(save, "ran"), "w").write(f"{time.time()} ")
    time.sleep(float(os.environ.get("SLOW_TRAIN_SECONDS", "0.6")))
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        open(os.path.join(save, name), "wb").write(b"ckpt")
    open(os.path.join(save, "ran"), "a").write(f"{time.time()} {os.environ['OMP_NUM_THREADS']}")
    print("done training")
    """
)


def slow_steps(tmp_path, n, queue):
    script = tmp_path / "slow_train.py"
    script.write_text(SLOW_TRAIN)
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    folders = [tmp_path / f"run{i}" for i in range(n)]
    for folder in folders:
        run.queue(
            steps.Step(
                "train", str(folder), [sys.executable, str(script), "--save-dir", str(folder)]
            )
        )
    return folders


def spans(folders):
    out = []
    for folder in folders:
        start, end, threads = (folder / "ran").read_text().split()
        out.append((float(start), float(end), int(threads)))
    return out


def test_steps_run_jobs_at_a_time_and_a_step_waits_for_what_it_reads(tmp_path, capsys):
    queue = tmp_path / "queue"
    folders = slow_steps(tmp_path, 4, queue)
    # an evaluation of run0's checkpoint: it may only start once run0's training has ended
    probe = tmp_path / "run0" / "probe.log"
    check = "import os, sys; print(os.path.exists(sys.argv[1]))"
    ckpt = str(tmp_path / "run0" / "checkpoint_best.pt")
    steps.Steps("t.sh", False, str(queue)).queue(
        steps.Step("evaluate", str(probe), [sys.executable, "-c", check, ckpt])
    )
    assert run_queue(queue, "t.sh", "--jobs", "2") == 0
    ran = spans(folders)
    # never more than two at once: at every start, count the ones running
    for start, _, _ in ran:
        assert sum(s <= start < e for s, e, _ in ran) <= 2
    assert sum(s < ran[0][1] for s, _, _ in ran) == 2  # the first two ran together
    assert {threads for _, _, threads in ran} == {max(1, (os.cpu_count() or 1) // 2)}
    assert probe.read_text() == "True\n"  # run0's checkpoint was there when it was evaluated
    state = json.loads((tmp_path / ".rows.json").read_text())
    assert [s["state"] for s in state["steps"]] == ["done"] * 5 and state["jobs"] == 2
    out = capsys.readouterr().out
    assert "t.sh: 4 trainings and 1 evaluations, 2 at a time" in out
    started = [line for line in out.splitlines() if line.startswith("t.sh: started ")]
    assert started[:4] == [f"t.sh: started run{i}" for i in range(4)]
    assert started[4:] == ["t.sh: started run0/probe.log"]


def test_the_time_budget_sets_stop_time_hours_and_counts_what_a_checkpoint_holds(fake, tmp_path):
    import torch

    queue = tmp_path / "queue"
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    resumed.mkdir()
    torch.save({"extra_state": {"previous_training_time": 1800.0}}, resumed / "checkpoint_last.pt")
    for folder in (fresh, resumed):
        run.queue(steps.Step("train", str(folder), ["fairseq-train", "--save-dir", str(folder)]))
    fake.stopped_by_time.add(str(fresh))
    started = time.time() - 60  # the recipe began a minute ago (its data preparation)
    run_queue(queue, "t.sh", "--time-budget", "1h", "--started", str(started), "--reserve", "10m")
    hours = {c[2]: float(c[c.index("--stop-time-hours") + 1]) for c in fake.calls}
    allowance = (
        3600 - 600 - 60 - rows.STARTUP
    )  # the budget, less the reserve, the time gone, start-up
    assert hours[str(fresh)] * 3600 == pytest.approx(allowance, abs=5)
    assert hours[str(resumed)] * 3600 == pytest.approx(1800 + allowance, abs=5)
    assert (fresh / ".budget").is_file() and not (fresh / ".done").is_file()  # rerun: resumes
    assert (resumed / ".done").is_file()  # it ended by itself before the limit


def test_a_spent_budget_starts_no_training_and_skips_what_is_optional(fake, tmp_path, capsys):
    queue = tmp_path / "queue"
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    trained, untrained = tmp_path / "trained", tmp_path / "untrained"
    trained.mkdir()
    (trained / "checkpoint_best.pt").write_bytes(b"from an earlier, budgeted run")
    for folder in (trained, untrained):
        run.queue(steps.Step("train", str(folder), ["fairseq-train", "--save-dir", str(folder)]))
    valid = ["fairseq-eval-lm", "--path", f"{trained}/checkpoint_best.pt", "--gen-subset", "valid"]
    fake.perplexity[str(trained), "valid"] = 99.0
    run.queue(steps.Step("evaluate", f"{trained}/valid.eval.log", valid))
    run.queue(steps.Step("evaluate", str(tmp_path / "analysis" / "kl.log"), ["kl"], optional=True))
    run_queue(queue, "t.sh", "--time-budget", "10m", "--started", str(time.time() - 600))
    out = capsys.readouterr().out
    assert (
        "t.sh: trained: stopped by the time budget (not started: the time budget is spent)" in out
    )
    assert "t.sh: untrained: skipped (not started: the time budget is spent)" in out
    assert "t.sh: analysis/kl.log: skipped (the time budget is spent)" in out
    assert "the time budget is spent; the evaluations still run" in out
    assert [c[0] for c in fake.calls] == ["fairseq-eval-lm"]  # the one mandatory evaluation
    assert (trained / ".budget").is_file() and "99.0" in (trained / "valid.eval.log").read_text()


def test_status_lines_come_from_the_logs_alone(tmp_path):
    running, finished = tmp_path / "kn-g0.2", tmp_path / "none-g0"
    for folder in (running, finished):
        folder.mkdir()
        (folder / ".command").write_text(
            "fairseq-train d --lr-scheduler paper_halving --halvings 8 --max-epoch 10"
        )
    log = train_log("kn", "0.2", [(1, (400.0, 210.0)), (2, (190.0, 150.5), 0.5)], complete=False)
    log += "x | paper_halving: epoch 2: valid loss 7 does not improve on 6 (epoch 1); halving 1/8: "
    log += "lr 1 -> 0.5\nx | INFO | train_inner | epoch 003:     15 / 20 loss=9, ups=4, lr=0.5\n"
    (running / "train.log").write_text(log)
    (finished / "train.log").write_text(train_log("none", "0", [(1, (300.0, 200.0))]))
    (finished / ".done").write_text("fairseq-train d")
    now = time.time()
    lines = row_status.status_lines(
        [(str(running), "running", now + 600, ""), (str(finished), "done", None, "")], now
    )
    # epoch 3, three quarters done; 7.25 epochs of 20 updates at 4 updates/s to --max-epoch 10
    # (36 s) is sooner than the budget's 10 min
    assert (
        lines[0].split()
        == (
            "kn-g0.2 epoch 3 (75%) lr 0.5 halvings 1/8 valid ppl 150.50 4.0 upd/s left <= 36 s "
            "training"
        ).split()
    )
    assert lines[1].split() == "none-g0 epoch 1 lr 1 halvings 0/8 valid ppl 200.00 finished".split()
    assert lines[2] == "all rows: 4.0 upd/s (1 training)"
    # from another shell: WORK/.rows.json and the logs; its runner has gone (a dead pid)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"prog": "ptb.sh", "pid": dead.pid, "jobs": 2, "mps": True, "deadline": now + 60}
    record["steps"] = [
        {"kind": "train", "target": str(running), "state": "running", "stop_at": None, "note": ""},
        {"kind": "evaluate", "target": str(running / "valid.eval.log"), "state": "waiting"},
    ]
    (tmp_path / ".rows.json").write_text(json.dumps(record))

    def status():  # the command a user types in another shell
        command = [sys.executable, str(RECIPES / "report.py"), "status", str(tmp_path)]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    head, row = status().splitlines()[:2]
    assert head.startswith("ptb.sh: 2 at a time, under CUDA MPS, time budget ends in ")
    assert head.endswith("(not running now)")
    assert row.split()[:4] == ["kn-g0.2", "epoch", "3", "(75%)"] and row.endswith("stopped")
    # the runner of the last phase ran evaluations only: the run folders still show every row
    record["steps"] = record["steps"][1:]
    (tmp_path / ".rows.json").write_text(json.dumps(record))
    again = status().splitlines()
    assert [line.split()[0] for line in again[1:]] == ["kn-g0.2", "none-g0"]
    assert again[2].endswith("finished")
    # WORK named relative to here, its runs recorded with absolute paths: each row once
    record["steps"] = [{"kind": "train", "target": str(finished), "state": "done"}]
    (tmp_path / ".rows.json").write_text(json.dumps(record))
    relative = row_status.work_status(os.path.relpath(tmp_path))
    assert sorted(line.split()[0] for line in relative[1:]) == ["kn-g0.2", "none-g0"]


def test_sigterm_stops_every_step_and_the_runner_says_how_to_resume(tmp_path):
    queue = tmp_path / "queue"
    folders = slow_steps(tmp_path, 2, queue)
    env = dict(os.environ, SLOW_TRAIN_SECONDS="60")
    runner = subprocess.Popen(
        [sys.executable, str(RECIPES / "rows.py"), "--queue", str(queue), "--prog", "t.sh"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not all((f / "ran").exists() for f in folders) and time.time() < deadline:
        time.sleep(0.2)
    runner.send_signal(signal.SIGTERM)  # what a cluster's wall-clock limit sends
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 130 and "t.sh: stopped; rerun the recipe to resume" in err
    state = json.loads((tmp_path / ".rows.json").read_text())
    assert [s["state"] for s in state["steps"]] == ["cut", "cut"]
    for folder in folders:  # each training was stopped before it finished
        assert len((folder / "ran").read_text().split()) == 1 and not (folder / ".done").exists()
    assert not queue.exists()


# ---------------------------------------------------------------- CUDA MPS, with a stand-in


STAND_IN = """#!/bin/sh
# nvidia-cuda-mps-control stand-in: records each call (arguments, pipe folder, stdin)
log="$MPS_RECORD"
if [ "$1" = -d ]; then
  echo "-d $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
  [ -n "$MPS_FAIL_START" ] && exit 1
  touch "$CUDA_MPS_PIPE_DIRECTORY/running"
  exit 0
fi
read -r command
echo "$command $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
case "$command" in
  get_server_list) [ -f "$CUDA_MPS_PIPE_DIRECTORY/running" ] && [ -z "$MPS_DEAF" ] ;;
  quit) rm -f "$CUDA_MPS_PIPE_DIRECTORY/running" ;;
esac
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A stand-in nvidia-cuda-mps-control first on PATH; a CUDA probe that only checks that it
    was pointed at the daemon's pipe folder. Returns the file of recorded calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / "nvidia-cuda-mps-control"
    control.write_text(STAND_IN)
    control.chmod(0o755)
    record = tmp_path / "mps-calls"
    record.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPS_RECORD", str(record))
    probe = "import os, sys; sys.exit(not os.path.isdir(os.environ['CUDA_MPS_PIPE_DIRECTORY']))"
    monkeypatch.setattr(mps, "PROBE", [sys.executable, "-c", probe])
    return record


def calls(record):
    return [line.split()[0] for line in record.read_text().splitlines()]


def mps_queue(tmp_path, fake):
    queue = tmp_path / "work" / "queue"
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    for name in ("none-g0", "kn-g0.2"):
        folder = str(tmp_path / "work" / name)
        run.queue(steps.Step("train", folder, ["fairseq-train", "--save-dir", folder]))
    fake.failing[str(tmp_path / "work" / "kn-g0.2")] = 1  # an error in one of the rows
    return queue


def test_mps_serves_the_rows_and_is_stopped_after_an_error(stand_in, fake, tmp_path, capsys):
    queue = mps_queue(tmp_path, fake)
    assert run_queue(queue, "t.sh", "--mps", "--device", "cuda") == 0
    pipe = tmp_path / "work" / "mps" / "pipe"
    # answered before -d (no daemon of ours yet), started, answered, then stopped
    assert calls(stand_in) == ["get_server_list", "-d", "get_server_list", "quit"]
    assert all(line.endswith(str(pipe)) for line in stand_in.read_text().splitlines())
    assert all(env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe) for env in fake.envs)
    assert all(
        env["CUDA_MPS_LOG_DIRECTORY"] == str(tmp_path / "work" / "mps" / "log") for env in fake.envs
    )
    assert "t.sh: kn-g0.2: FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_the_mps_daemon_is_stopped_on_ctrl_c_and_on_a_crash(error, stand_in, fake, tmp_path):
    queue = mps_queue(tmp_path, fake)

    def broken(*args, **kwargs):
        raise error("while starting a row")

    rows._spawn = broken  # the fake fixture puts the original back
    if error is KeyboardInterrupt:
        assert run_queue(queue, "t.sh", "--mps", "--device", "cuda") == 130
    else:
        with pytest.raises(OSError):
            run_queue(queue, "t.sh", "--mps", "--device", "cuda")
    assert calls(stand_in)[-1] == "quit"


@pytest.mark.parametrize(
    "setting, message",
    [
        ("MPS_FAIL_START", "t.sh: MPS=1: nvidia-cuda-mps-control -d did not start (exit 1)"),
        ("MPS_DEAF", "t.sh: MPS=1: the MPS daemon does not answer"),
    ],
)
def test_a_daemon_that_does_not_start_or_answer_stops_before_any_training(
    setting, message, stand_in, fake, tmp_path, monkeypatch
):
    queue = mps_queue(tmp_path, fake)
    monkeypatch.setenv(setting, "1")
    with pytest.raises(SystemExit) as stopped:
        run_queue(queue, "t.sh", "--mps", "--device", "cuda")
    assert str(stopped.value).startswith(message) and "\n" not in str(stopped.value)
    assert fake.calls == []  # nothing trained
    if setting == "MPS_DEAF":
        assert calls(stand_in)[-1] == "quit"  # the daemon that did start is stopped again


def test_an_mps_daemon_already_serving_the_folder_is_not_taken_over(stand_in, fake, tmp_path):
    queue = mps_queue(tmp_path, fake)
    pipe = tmp_path / "work" / "mps" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "running").touch()  # another recipe's daemon, in this WORK
    with pytest.raises(SystemExit, match="an MPS daemon already serves .*mps/pipe"):
        run_queue(queue, "t.sh", "--mps", "--device", "cuda")
    assert calls(stand_in) == ["get_server_list"] and (pipe / "running").exists()


def test_mps_is_refused_on_a_cpu_and_without_its_control_program(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        steps.check_mps("cpu", "ptb.sh")
    assert "ptb.sh: MPS=1 needs DEVICE=cuda" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control there
    with pytest.raises(SystemExit):
        steps.check_mps("cuda", "ptb.sh")
    assert (
        "ptb.sh: MPS=1 needs nvidia-cuda-mps-control (part of the NVIDIA driver) on PATH"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit, match="--mps needs a CUDA device"):
        with mps.mps_daemon(str(tmp_path), "bench", flag="--mps", device="cpu"):
            pass


def test_the_queue_is_never_left_behind(tmp_path):
    assert rows.main(["--queue", str(tmp_path / "none")]) == 0  # nothing queued: nothing to do
    assert not Path(tmp_path / ".rows.json").exists()


def test_a_run_the_time_budget_stopped_inside_an_epoch_is_placed_by_its_update_count():
    """fairseq checks the time after each update, validates, then logs the cut epoch's summary;
    the summary's update count (not the last progress line) says where the run stopped."""
    from fairseq_noising.analysis import logs

    lines = [
        "x | INFO | train_inner | epoch 001:    300 / 1328 loss=362.1, ups=4.07, lr=1",
        "x | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: "
        "0.0285 > stop_time_hours: 0.0285 hour(s)",
        "x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.8 | ppl 918.76",
        "x | INFO | train | epoch 001 | loss 370 | ppl 1716.9 | num_updates 389 | lr 1 | wall 130",
    ]
    run = logs.parse_log("\n".join(lines))
    assert run.stop == "time" and run.trained_hours == 0.0285
    assert run.stopped_at == (1, 389, 1328) and run.epochs_done == 389 / 1328
    assert row_status.status_lines([], 0.0) == []
    finished = logs.parse_log("\n".join(lines[:1] + lines[2:]))  # the epoch ended by itself
    assert finished.stopped_at is None and finished.epochs_done == 1.0


def test_the_page_is_rewritten_for_a_validation_not_for_progress_lines(tmp_path):
    log = tmp_path / "train.log"
    progress = "x | INFO | train_inner | epoch 001:    100 / 1328 loss=7.1, ups=4.0, lr=1\n"
    validation = "x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.8 | ppl 918\n"
    log.write_text(progress)
    offset, validated = rows.validations_since(str(log), 0)
    assert (offset, validated) == (len(progress), False)
    with log.open("a") as f:  # a validation line still being written: not yet
        f.write(validation[:30])
    assert rows.validations_since(str(log), offset) == (offset, False)
    with log.open("a") as f:
        f.write(validation[30:] + progress)
    offset, validated = rows.validations_since(str(log), offset)
    assert validated and offset == log.stat().st_size
    assert rows.validations_since(str(log), offset) == (offset, False)  # read once
    assert rows.validations_since(str(tmp_path / "not yet"), 0) == (0, False)
