"""recipes/steps.py: a finished step is skipped and a changed one runs again, a training or an
evaluation is queued (and recipes/rows.py runs the queue: an unfinished training resumes, a failed
one says why, an evaluation is redone for a newer checkpoint), paths as pages show them. fairseq is
replaced by a script of outputs (recipe_kit.FakeFairseq); everything runs in-process."""

import os
import shlex

import pytest
from recipe_kit import lines_of, run_queue, steps


def test_a_finished_step_is_skipped_and_a_changed_one_starts_again_from_an_empty_folder(
    fake, tmp_path, capsys
):
    run = steps.Steps("t.sh", dry_run=False)
    data = tmp_path / "data-bin"
    cmd = ["fairseq-preprocess", "--only-source", "--destdir", str(data)]
    run.prepare(str(data), cmd)
    run.prepare(str(data), cmd)
    assert len(fake.calls) == 1
    assert lines_of(capsys) == [
        f"+ fairseq-preprocess --only-source --destdir {data}",
        f"= done already: fairseq-preprocess --only-source --destdir {data}",
    ]
    (data / "junk").write_text("from the first run")
    run.prepare(str(data), cmd + ["--workers", "2"])  # a changed setting: the step runs again
    assert len(fake.calls) == 2 and not (data / "junk").exists()
    fake.exit_code = 1  # a failed step leaves no marker: the next start runs it again
    with pytest.raises(SystemExit):
        run.prepare(str(data), cmd)
    assert "t.sh: step failed (exit 1): fairseq-preprocess" in capsys.readouterr().err
    fake.exit_code = 0
    run.prepare(str(data), cmd)
    assert len(fake.calls) == 4 and lines_of(capsys)[-1].startswith("+ ")


def test_an_unfinished_training_resumes_and_a_failed_one_says_so(fake, tmp_path, capsys):
    queue = tmp_path / "queue"
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    save = tmp_path / "kn-g0.2"
    cmd = ["fairseq-train", "data-bin", "--save-dir", str(save)]
    fake.train_logs[str(save)] = "epoch 1 done\n"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"cut off")
    (save / "train.log").write_text("before the cut\n")
    run.queue(steps.Step("train", str(save), cmd))
    assert (save / ".command").read_text() == shlex.join(cmd)  # for pages written meanwhile
    assert run_queue(queue) == 0 and not queue.exists()
    out = capsys.readouterr().out
    assert f"t.sh: resuming {save} from checkpoint_last.pt" in out and "kn-g0.2: finished" in out
    assert (save / "train.log").read_text() == "before the cut\nepoch 1 done\n"  # appended
    assert (save / ".done").read_text() == shlex.join(cmd)
    run.queue(steps.Step("train", str(save), cmd))
    assert len(fake.calls) == 1 and "= done already" in capsys.readouterr().out
    assert not queue.exists()
    other = tmp_path / "kn-g0.4"
    fake.failing[str(other)] = 3
    run.queue(
        steps.Step("train", str(other), ["fairseq-train", "data-bin", "--save-dir", str(other)])
    )
    assert run_queue(queue) == 0  # a failed run does not stop the recipe: the page says so
    assert (
        "t.sh: kn-g0.4: FAILED (exit 3: RuntimeError: CUDA out of memory)"
        in capsys.readouterr().out
    )
    assert (other / ".failed").read_text() == "exit 3: RuntimeError: CUDA out of memory\n"
    assert not (other / ".done").exists()
    del fake.failing[str(other)]  # run again: it trains, and the failure is forgotten
    run.queue(
        steps.Step("train", str(other), ["fairseq-train", "data-bin", "--save-dir", str(other)])
    )
    run_queue(queue)
    assert (other / ".done").exists() and not (other / ".failed").exists()


def test_an_evaluation_is_redone_when_its_checkpoint_is_newer(fake, tmp_path, capsys):
    queue = tmp_path / "queue"
    run = steps.Steps("t.sh", dry_run=False, queue=str(queue))
    logs = {}
    for name, ppl in (("none-g0", 130.1), ("kn-g0.2", 120.2)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "checkpoint_best.pt").write_bytes(b"x")
        fake.perplexity[(str(folder), "valid")] = ppl
        logs[name] = steps.Step(
            "evaluate",
            str(folder / "valid.eval.log"),
            [
                "fairseq-eval-lm",
                "data-bin",
                "--path",
                str(folder / "checkpoint_best.pt"),
                "--gen-subset",
                "valid",
            ],
        )
        run.queue(logs[name])
    run_queue(queue)
    assert (tmp_path / "kn-g0.2" / "valid.eval.log").read_text().endswith("Perplexity: 120.2\n")
    assert not (tmp_path / "kn-g0.2" / "valid.eval.log.part").exists()
    for step in logs.values():
        run.queue(step)
    assert not queue.exists() and len(fake.calls) == 2
    ckpt = tmp_path / "kn-g0.2" / "checkpoint_best.pt"
    os.utime(ckpt, ns=(ckpt.stat().st_mtime_ns + 10**9,) * 2)  # retrained after its evaluation
    fake.perplexity[(str(tmp_path / "kn-g0.2"), "valid")] = 110.3
    for step in logs.values():
        run.queue(step)
    run_queue(queue)
    assert [c[3] for c in fake.calls[2:]] == [str(ckpt)]
    assert (tmp_path / "kn-g0.2" / "valid.eval.log").read_text().endswith("Perplexity: 110.3\n")
    out = capsys.readouterr().out
    assert f"> {tmp_path}/kn-g0.2/valid.eval.log 2>&1" in out  # the line shows where output goes


def test_a_checkpoint_named_as_label_path_is_an_input_too(tmp_path):
    ckpt, other = tmp_path / "kn" / "checkpoint_best.pt", tmp_path / "none.pt"
    ckpt.parent.mkdir()
    for path in (ckpt, other):
        path.write_bytes(b"x")
    marker = tmp_path / "kl.log.done"
    marker.write_text("line\n")
    cmd = ["fairseq-noise-analyze", "kl", f"none={other}", f"kn={ckpt}", "--data", "d=x"]
    assert steps.newer_inputs(str(marker), cmd) == []
    os.utime(ckpt, ns=(marker.stat().st_mtime_ns + 10**9,) * 2)
    assert steps.newer_inputs(str(marker), cmd) == [str(ckpt)]
    assert not steps.is_finished(str(marker), "line", cmd, fresh_check=True)


def test_a_dry_run_prints_every_command_and_writes_nothing(fake, tmp_path, capsys):
    run = steps.Steps("t.sh", dry_run=True, queue=str(tmp_path / "queue"))
    run.prepare(str(tmp_path / "data-bin"), ["fairseq-preprocess", "--destdir", "x"])
    run.queue(steps.Step("train", str(tmp_path / "none-g0"), ["fairseq-train", "--save-dir", "y"]))
    run.queue(
        steps.Step(
            "evaluate",
            str(tmp_path / "none-g0" / "valid.eval.log"),
            ["fairseq-eval-lm", "--path", "z"],
        )
    )
    run.fetch("http://example.org/ptb.train.txt", str(tmp_path / "ptb" / "ptb.train.txt"), "hint")
    out = lines_of(capsys)
    assert [line.split()[1] for line in out] == [
        "fairseq-preprocess",
        "fairseq-train",
        "fairseq-eval-lm",
        "curl",
    ]
    assert all(line.startswith("+ ") for line in out)
    assert fake.calls == [] and list(tmp_path.iterdir()) == []


def test_a_step_waits_for_the_steps_whose_output_it_reads(tmp_path):
    train = steps.Step("train", str(tmp_path / "kn-g0.2"), ["fairseq-train", "--save-dir", "x"])
    valid = steps.Step(
        "evaluate",
        str(tmp_path / "kn-g0.2" / "valid.eval.log"),
        ["fairseq-eval-lm", "--path", str(tmp_path / "kn-g0.2" / "checkpoint_best.pt")],
    )
    kl = steps.Step(
        "evaluate",
        str(tmp_path / "analysis" / "kl.log"),
        [
            "analyze",
            "kl",
            f"kn={tmp_path}/kn-g0.2/checkpoint_best.pt",
            f"none={tmp_path}/none/c.pt",
        ],
    )
    gen = steps.Step("evaluate", str(tmp_path / "kn-g0.2" / "test.gen"), ["generate"])
    bleu = steps.Step(
        "evaluate",
        str(tmp_path / "kn-g0.2" / "test.bleu"),
        ["score", "--generate-output", str(tmp_path / "kn-g0.2" / "test.gen")],
    )
    other = steps.Step("train", str(tmp_path / "kn-g0.20"), ["fairseq-train"])
    assert valid.needs(train) and kl.needs(train) and bleu.needs(gen)
    assert not train.needs(valid) and not gen.needs(valid) and not bleu.needs(valid)
    assert not valid.needs(other) and not kl.needs(other)  # kn-g0.20 is not kn-g0.2
    assert steps.queued(str(tmp_path / "missing")) == []


def test_paths_are_shown_relative_to_the_repository(tmp_path, monkeypatch):
    repo = tmp_path / "top" / "repo"
    (repo / "runs").mkdir(parents=True)
    (tmp_path / "top" / "shared" / "data").mkdir(parents=True)
    r, top = str(repo), str(tmp_path / "top")
    assert [
        steps.shown(p, r)
        for p in (
            f"{r}/runs/ptb/data-bin",
            r,
            f"{top}/shared/data/ptb",
            "/elsewhere/ptb",
            "runs/x",
            f"{r}2/x",
        )
    ] == ["runs/ptb/data-bin", ".", "../shared/data/ptb", "/elsewhere/ptb", "runs/x", "../repo2/x"]
    cmd = [
        f"{r}/.venv/bin/fairseq-train",
        f"{r}/runs/data-bin",
        "--user-dir",
        f"{r}/fairseq_noising",
        f"kn gamma_0 0.2={r}/results/kn.log",
        "--trainpref",
        f"{top}/shared/data/ptb/ptb.train.txt",
        "--x",
        f"/elsewhere{r}/y",
        f"{r}/a b",
    ]
    assert steps.shown_command(cmd, r) == (
        ".venv/bin/fairseq-train runs/data-bin --user-dir fairseq_noising "
        "'kn gamma_0 0.2=results/kn.log' --trainpref ../shared/data/ptb/ptb.train.txt "
        f"--x /elsewhere{r}/y 'a b'"
    )
    assert steps.shown(f"Data: {top}/shared/data/ptb. Runs in {r}/runs\nand {r}. ({r})", r) == (
        "Data: ../shared/data/ptb. Runs in runs\nand ../repo. (.)"
    )
    # a marker's line, with its output redirection
    line = shlex.join(cmd[:2]) + f" > {shlex.quote(r + '/runs/v.log')} 2>&1"
    assert steps.shown_line(line, r) == ".venv/bin/fairseq-train runs/data-bin > runs/v.log 2>&1"
    # the repository reached through a symbolic link: its real path is relative too, and ".." is
    # only used for what lies beside the real folder (where ".." from the repository leads)
    link = tmp_path / "link"
    link.symlink_to(repo)
    monkeypatch.setenv("PWD", str(link))
    assert [
        steps.shown(p, str(link))
        for p in (f"{r}/x", f"{link}/x", f"{top}/shared", f"{tmp_path}/other")
    ] == ["x", "x", "../shared", f"{tmp_path}/other"]
