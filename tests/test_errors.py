"""Errors a caller can catch: a :class:`NoisingError` is a ``ValueError`` in-process and one line
with exit status 1 only at a program's boundary.

Fast tier: in-process callers (a task set up as ``fairseq-train`` sets it up, the scheduler as
the trainer builds it, the console scripts' ``main``) catch it with ``except ValueError``; the
console scripts' ``cli_main`` and the hook that the plugin installs in fairseq's commands turn it
into its line and leave any other exception's traceback to the hook that was there before; the
plugin installs no hook in a process that is not one of fairseq's commands (this one); an error
carried back by torch from a DataLoader worker is recognised. Slow tier: fresh interpreters with
the hook, an uncaught error in the main process, in a DataLoader worker and in a process started
by ``torch.multiprocessing.spawn`` (what fairseq's ``call_main`` uses on several GPUs), and
``fairseq-train`` (and ``python -m fairseq_cli.train``) with a bad flag.
"""

import copy
import logging
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import CLI_ENV, build_task, lm_train_argv

from fairseq_noising import errors
from fairseq_noising.cli import analyze, preview
from fairseq_noising.errors import NoisingError

GAMMA_LINE = "fairseq-noising: error: --noise-gamma must lie in [0, 1], got 1.5"


def test_a_noising_error_is_a_value_error_whose_text_is_the_line():
    try:
        raise NoisingError("--noise-gamma must lie in [0, 1], got 1.5")
    except ValueError as caught:  # what a sweep driver or a notebook writes
        err = caught
    assert isinstance(err, NoisingError)
    assert err.message == "--noise-gamma must lie in [0, 1], got 1.5"
    assert str(err) == GAMMA_LINE
    # a process pool sends exceptions back pickled: the same message, the prefix once
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is NoisingError
    assert (back.message, str(back)) == (err.message, GAMMA_LINE)


# --- in-process callers ---------------------------------------------------------------------------


def test_task_set_up_with_a_bad_flag_raises_a_value_error(tmp_path):
    with pytest.raises(ValueError) as refused:
        build_task(lm_train_argv(tmp_path / "data", scheme="kn", gamma=1.5))
    assert str(refused.value) == GAMMA_LINE


def test_scheduler_with_a_bad_option_raises_a_value_error():
    """``--lr-scheduler paper_halving --halvings 0``, parsed and built as fairseq-train does."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import build_optimizer
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    import fairseq_noising.optim  # noqa: F401  (registers paper_halving)

    scheduler = ["--lr-scheduler", "paper_halving", "--stop-min-lr", 0, "--halvings", 0]
    argv = lm_train_argv("data", *scheduler, task="language_modeling", lr=1.0)
    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
    cfg = convert_namespace_to_omegaconf(args)
    optimizer = build_optimizer(copy.copy(cfg.optimizer), list(torch.nn.Linear(2, 2).parameters()))
    with pytest.raises(ValueError) as refused:
        build_lr_scheduler(cfg.lr_scheduler, optimizer)
    assert isinstance(refused.value, NoisingError)
    assert "--halvings" in refused.value.message and "got 0" in refused.value.message


@pytest.mark.parametrize(
    "main, argv, message",
    [
        (analyze.main, ["curves", "{tmp}/missing.log"], "{tmp}/missing.log does not exist"),
        (analyze.main, ["no-such-command"], "invalid choice: 'no-such-command'"),
        (preview.main, ["{tmp}/missing", "--noise-scheme", "kn"], "{tmp}/missing does not exist"),
    ],
    ids=["analyze-file", "analyze-parser", "preview"],
)
def test_console_script_main_raises_a_value_error(main, argv, message, tmp_path):
    with pytest.raises(ValueError) as refused:
        main([a.format(tmp=tmp_path) for a in argv])
    assert message.format(tmp=tmp_path) in refused.value.message
    assert str(refused.value) == errors.PREFIX + refused.value.message


@pytest.fixture
def root_logging():
    """The root logger as it was: the console scripts set its level (and ``analyze`` its
    handlers) for the whole process."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for handler in set(root.handlers) - set(handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(
    "script, argv, line",
    [
        (analyze, ["curves", "{tmp}/x.log"], "{tmp}/x.log does not exist"),
        (
            preview,
            ["{tmp}/x"],
            "data directory {tmp}/x does not exist (expected fairseq-preprocess",
        ),
    ],
    ids=["analyze", "preview"],
)
def test_console_script_cli_main_exits_with_the_line(
    script, argv, line, tmp_path, monkeypatch, capsys, root_logging
):
    """The boundary: ``SystemExit(line)``, which Python prints alone and ends with status 1."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.setattr(sys, "argv", ["fairseq-noise-x", *argv])
    with pytest.raises(SystemExit) as ended:
        script.cli_main()
    assert isinstance(ended.value.code, str), ended.value.code
    assert ended.value.code.startswith(errors.PREFIX + line.format(tmp=tmp_path))
    assert "\n" not in ended.value.code
    assert capsys.readouterr().out == ""


# --- the hook ---------------------------------------------------------------------------------


def test_the_plugin_installs_no_hook_outside_fairseq_commands():
    """pytest is not one of fairseq's commands: the plugin leaves this process's hook alone (the
    hook in ``fairseq-train``: test_fairseq_train_with_a_bad_flag_ends_with_its_line)."""
    import fairseq_noising.fairseq_plugin  # noqa: F401  (what --user-dir runs)

    assert getattr(sys.excepthook, "noising_error_type", None) is None


def test_the_hook_is_installed_once(monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    errors.install_excepthook()
    hook = sys.excepthook
    assert getattr(hook, "noising_error_type", None) is NoisingError
    errors.install_excepthook()  # again, as a second import under another name would
    assert sys.excepthook is hook


@pytest.fixture
def hook(monkeypatch):
    """The hook installed over a recorder of what reaches the hook that was there before."""
    reached = []
    monkeypatch.setattr(sys, "excepthook", lambda *info: reached.append(info))
    errors.install_excepthook()
    return sys.excepthook, reached


def raised(exc):
    try:
        raise exc
    except BaseException as e:
        return type(e), e, e.__traceback__


def test_hook_prints_a_noising_error_as_its_line(hook, capsys):
    excepthook, reached = hook
    excepthook(*raised(NoisingError("--noise-gamma must lie in [0, 1], got 1.5")))
    assert capsys.readouterr() == ("", GAMMA_LINE + "\n")
    assert reached == []


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("boom"),
        KeyError("fairseq-noising: error: not ours"),
    ],
    ids=["runtime", "key"],
)
def test_hook_hands_other_exceptions_to_the_previous_hook(exc, hook, capsys):
    excepthook, reached = hook
    info = raised(exc)
    excepthook(*info)
    assert reached == [info]
    assert capsys.readouterr() == ("", "")


def test_hook_keeps_the_traceback_of_an_error_raised_while_handling_ours(monkeypatch, capsys):
    """With Python's own hook behind it: a RuntimeError raised from a NoisingError is printed
    as Python prints it, both tracebacks and all."""
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    errors.install_excepthook()
    try:
        try:
            raise NoisingError("--noise-gamma must lie in [0, 1], got 1.5")
        except NoisingError as err:
            raise RuntimeError("the sweep failed") from err
    except RuntimeError as e:
        sys.excepthook(type(e), e, e.__traceback__)
    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last):") == 2, err
    assert f"fairseq_noising.errors.NoisingError: {GAMMA_LINE}\n" in err
    assert err.endswith("RuntimeError: the sweep failed\n"), err


def worker_error(dataset):
    """The exception that torch raises in the main process for an error in a DataLoader worker
    (``torch._utils.ExceptionWrapper``, as the worker loop builds it)."""
    from torch._utils import ExceptionWrapper

    try:
        dataset[0]
    except Exception:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 0")
    try:
        wrapper.reraise()
    except Exception as e:
        return e


class BadItems(torch.utils.data.Dataset):
    def __init__(self, exc):
        self.exc = exc

    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise self.exc


def test_an_error_carried_back_from_a_worker_is_its_line(hook, capsys):
    excepthook, reached = hook
    carried = worker_error(BadItems(NoisingError("--noise-gamma must lie in [0, 1], got 1.5")))
    assert isinstance(carried, NoisingError) and "\n" in carried.message  # the worker's traceback
    assert errors.error_line(carried) == GAMMA_LINE
    excepthook(*raised(carried))
    assert capsys.readouterr().err == GAMMA_LINE + "\n"
    other = worker_error(BadItems(KeyError("fairseq-noising: error: not ours")))
    assert errors.error_line(other) is None
    excepthook(*raised(other))
    assert len(reached) == 1 and reached[0][1] is other


# --- fresh interpreters: an uncaught error ends the program ------------------------------------

PRELUDE = """\
import sys
from fairseq_noising.errors import NoisingError, install_excepthook
install_excepthook()
"""

SCRIPTS = {
    "main": PRELUDE + "raise NoisingError('--noise-gamma must lie in [0, 1], got 1.5')\n",
    "other": PRELUDE + "raise RuntimeError('boom')\n",
    "dataloader": PRELUDE
    + textwrap.dedent(
        """\
        from torch.utils.data import DataLoader
        from helper import Bad
        for batch in DataLoader(Bad(), num_workers=1):
            pass
        """
    ),
    "spawn": PRELUDE
    + textwrap.dedent(
        """\
        import torch.multiprocessing
        from helper import fail
        if __name__ == "__main__":
            torch.multiprocessing.spawn(fail, nprocs=1, join=True)
        """
    ),
}

HELPER = """\
from fairseq_noising.errors import NoisingError

def fail(rank):
    raise NoisingError("--noise-gamma must lie in [0, 1], got 1.5")

class Bad:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        fail(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["main", "dataloader", "spawn"])
def test_an_uncaught_noising_error_is_one_line_and_exit_status_1(case, tmp_path):
    proc = run_script(case, tmp_path)
    report = f"exit {proc.returncode}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 1, report
    assert "Traceback" not in proc.stderr, report
    lines = proc.stderr.splitlines()
    # torch.multiprocessing may log a warning about the processes it ends; ours is the last line
    assert lines[-1] == GAMMA_LINE and lines.count(GAMMA_LINE) == 1, report
    if case != "spawn":
        assert lines == [GAMMA_LINE], report


@pytest.mark.slow
def test_another_uncaught_exception_keeps_its_traceback(tmp_path):
    proc = run_script("other", tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert proc.stderr.endswith("\nRuntimeError: boom\n"), proc.stderr
    assert "fairseq-noising" not in proc.stderr


def run_script(case, tmp_path):
    (tmp_path / "helper.py").write_text(HELPER)
    script = tmp_path / f"{case}.py"
    script.write_text(SCRIPTS[case])
    pythonpath = [str(tmp_path), os.environ.get("PYTHONPATH")]
    env = {**CLI_ENV, "PYTHONPATH": os.pathsep.join(filter(None, pythonpath))}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.parametrize("program", ["fairseq-train", "-m fairseq_cli.train"])
def test_fairseq_train_with_a_bad_flag_ends_with_its_line(program, tmp_path):
    """fairseq's own command, with the hook that the plugin installs there: one line, exit
    status 1, no traceback. ``--noise-gamma`` is refused when the task is set up, before any data
    is read, so no data is needed (the same with real data: tests/test_bad_input.py)."""
    if program.startswith("-m"):
        command = [sys.executable, *program.split()]
    else:
        command = [os.path.join(os.path.dirname(sys.executable), program)]
    argv = lm_train_argv(tmp_path / "data", "--batch-size", 2, scheme="kn", gamma=2)
    proc = subprocess.run(
        [*command, *map(str, argv), "--save-dir", str(tmp_path / "ckpt")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=CLI_ENV,
    )
    report = f"exit {proc.returncode}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 1, report
    assert "Traceback" not in proc.stderr + proc.stdout, report
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1] == "fairseq-noising: error: --noise-gamma must lie in [0, 1], got 2.0", report
    assert not any((tmp_path / "ckpt").glob("*")), report  # fairseq made the folder, no more
