"""Registration flows one way, and nothing global is installed beyond it.

Fast tier: the package's own import graph, read from its source, has no cycle
(``fairseq_plugin`` imports the sub-packages, never the reverse); which process is one of
fairseq's commands is read from its ``__main__`` (:func:`fairseq_compat.running_fairseq_command`).
Slow tier, in fresh interpreters: importing the mathematics changes no interpreter state and loads
no fairseq; importing the fairseq-side sub-packages registers their components but installs no
exception hook and no ``atexit`` handler outside fairseq's commands; the console scripts as
installed are recognised. (The checkpoint allow-list: tests/test_checkpoint_safety.py; the hook at work in
``fairseq-train`` and ``python -m fairseq_cli.train``: tests/test_errors.py; the gloo teardown:
tests/test_distributed.py.)
"""

import ast
import importlib.util
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from conftest import PLUGIN_DIR, REPO

PACKAGE = PLUGIN_DIR.name


# --- the import graph, from the source ------------------------------------------------------------


def module_names():
    """Dotted name of every module of the package -> whether it is a package (``__init__``)."""
    names = {}
    for path in sorted(PLUGIN_DIR.rglob("*.py")):
        parts = list(path.relative_to(PLUGIN_DIR.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        names[".".join(parts[:-1] if is_package else parts)] = is_package
    return names


def ancestors_and_self(name):
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def imported_by(name, is_package, tree, modules):
    """The package's modules that running ``tree`` (module ``name``) may import, at any depth of
    the file (module level, functions, ``if`` blocks). Importing ``a.b.c`` runs ``a`` and ``a.b``
    first, unless they are ``name``'s own packages, which are being imported already; a name read
    from a package (``from .. import __version__``) needs that package, whatever it is."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()

    def add_module(target):
        found.update(
            m for m in ancestors_and_self(target) - ancestors_and_self(name) if m in modules
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            add_module(target)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    add_module(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)  # a name defined in that module or package
    found.discard(name)
    return found


def import_graph():
    modules = module_names()
    graph = {}
    for name, is_package in modules.items():
        path = PLUGIN_DIR.parent.joinpath(*name.split("."))
        path = path / "__init__.py" if is_package else path.with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = imported_by(name, is_package, tree, modules)
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_reader_sees_the_imports_that_matter():
    """The graph is not empty by mistake: edges of every kind the reader resolves are there."""
    graph = import_graph()
    assert f"{PACKAGE}.models" in graph[f"{PACKAGE}.fairseq_plugin"]  # from . import models
    assert f"{PACKAGE}.fairseq_plugin" in graph[PACKAGE]  # inside ``if`` at module level
    # from ..data.noised_dataset import NoisedDataset: the module and the package it runs first
    uses = graph[f"{PACKAGE}.tasks.noised_language_modeling"]
    assert {f"{PACKAGE}.data", f"{PACKAGE}.data.noised_dataset", f"{PACKAGE}.errors"} <= uses
    assert f"{PACKAGE}.fairseq_compat" in graph[f"{PACKAGE}.stats_cache"]  # inside a function
    # absolute: from fairseq_noising.optim.best_params import ...
    assert f"{PACKAGE}.optim.best_params" in graph[f"{PACKAGE}.optim.paper_halving"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_sub_package_imports_the_plugin():
    graph = import_graph()
    back = sorted(m for m, uses in graph.items() if f"{PACKAGE}.fairseq_plugin" in uses)
    assert back == [PACKAGE], back  # only the package's __init__, which is what --user-dir runs


# --- fresh interpreters (slow tier, as in tests/test_core_without_fairseq.py) ---------------------


def run_python(*parts, args=()):
    """Runs the code ``parts`` (each dedented) in a fresh interpreter; returns its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(textwrap.dedent(part) for part in parts), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return proc.stdout


GLOBAL_STATE = """
import atexit, sys
import torch

def global_state():
    return (
        sys.excepthook,
        sys.displayhook,
        atexit._ncallbacks(),
        tuple(map(repr, torch.serialization.get_safe_globals())),
    )
"""


@pytest.mark.slow
def test_importing_the_mathematics_changes_no_interpreter_state():
    out = run_python(
        GLOBAL_STATE,
        """
        # what the mathematics imports from elsewhere does what it does (matplotlib.figure, say,
        # has matplotlib register the clean-up of its figure managers with atexit)
        import numpy, matplotlib.figure, matplotlib.ticker
        before = global_state()
        import fairseq_noising
        from fairseq_noising import ngram_stats, noiser, schemes, stats_cache
        from fairseq_noising.analysis import divergence, logs, ngrams, plots, pseudocounts
        assert global_state() == before, (before, global_state())
        print("FAIRSEQ", sorted({m.split(".")[0] for m in sys.modules} & {"fairseq", "fairseq_cli"}))
        print("PLUGIN", "fairseq_noising.fairseq_plugin" in sys.modules)
        """,
    )
    assert "FAIRSEQ []" in out and "PLUGIN False" in out, out


@pytest.mark.slow
def test_the_figures_leave_the_matplotlib_backend_alone():
    """A notebook's backend stays its own: the figures are drawn without pyplot."""
    out = run_python(
        """
        import matplotlib
        matplotlib.use("svg")
        import sys
        from fairseq_noising.analysis import plots
        print("BACKEND", matplotlib.get_backend(), "PYPLOT", "matplotlib.pyplot" in sys.modules)
        """
    )
    assert "BACKEND svg PYPLOT False" in out


@pytest.mark.slow
def test_sub_packages_register_without_hooks_outside_fairseq_commands():
    """The brief's check, and the registries: importing the fairseq-side sub-packages after
    fairseq (which also runs the plugin, through the package's ``__init__``) registers the tasks,
    models and scheduler, and leaves the exception hook and ``atexit`` as they were."""
    out = run_python(
        GLOBAL_STATE,
        """
        import fairseq
        from fairseq.models import ARCH_MODEL_REGISTRY
        from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
        from fairseq.tasks import TASK_REGISTRY
        hook, displayhook, callbacks, _ = global_state()
        import fairseq_noising.tasks, fairseq_noising.models, fairseq_noising.optim
        assert sys.excepthook is hook, sys.excepthook
        assert atexit._ncallbacks() == callbacks, (callbacks, atexit._ncallbacks())
        print("PLUGIN", "fairseq_noising.fairseq_plugin" in sys.modules)
        print("TASKS", "noised_language_modeling" in TASK_REGISTRY, "noised_translation" in TASK_REGISTRY)
        print("ARCHS", "noising_lstm_lm_small" in ARCH_MODEL_REGISTRY, "noising_lstm_iwslt_en_de" in ARCH_MODEL_REGISTRY)
        print("SCHEDULER", "paper_halving" in LR_SCHEDULER_REGISTRY)
        """,
    )
    for line in ("PLUGIN True", "TASKS True True", "ARCHS True True", "SCHEDULER True"):
        assert line in out, out


# --- which process is one of fairseq's commands ----------------------------------------------


def as_main(monkeypatch, module):
    monkeypatch.setitem(sys.modules, "__main__", module)
    from fairseq_noising.fairseq_compat import running_fairseq_command

    return running_fairseq_command()


SCRIPTS_AS_MAIN = """
import runpy, sys, types
from pathlib import Path
from fairseq_noising.fairseq_compat import running_fairseq_command
for script in sys.argv[1:]:
    main = types.ModuleType("__main__")
    main.__dict__.update(runpy.run_path(script, run_name="__not_main__"))
    sys.modules["__main__"] = main
    print("SCRIPT", Path(script).name, running_fairseq_command(), flush=True)
"""


@pytest.mark.slow
def test_fairseq_console_scripts_are_fairseq_commands():
    """Each of fairseq's console scripts next to this interpreter, with ``__main__`` as it is when
    the plugin loads: the wrapper has imported ``cli_main`` and runs it (run here under another
    name, so that it stops there). This package's own scripts are ``fairseq-noise-*``."""
    scripts = sorted(Path(sys.executable).parent.glob("fairseq-*"))
    out = run_python(SCRIPTS_AS_MAIN, args=[str(p) for p in scripts])
    seen = dict(line.split()[1:] for line in out.splitlines() if line.startswith("SCRIPT "))
    for name in ("fairseq-train", "fairseq-hydra-train", "fairseq-eval-lm", "fairseq-generate"):
        assert seen.get(name) == "True", out
    assert seen.get("fairseq-noise-preview") == "False", out
    for name, verdict in seen.items():
        assert verdict == str(not name.startswith("fairseq-noise-")), out


def test_python_m_fairseq_cli_is_a_fairseq_command(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.util.find_spec("fairseq_cli.eval_lm")
    assert as_main(monkeypatch, main)


def test_a_console_script_of_fairseq_is_a_fairseq_command(monkeypatch):
    """The ``__main__`` that pip's wrapper of ``fairseq-train`` makes (the installed scripts
    themselves: test_fairseq_console_scripts_are_fairseq_commands)."""
    from fairseq_cli.train import cli_main

    main = types.ModuleType("__main__")
    main.cli_main = cli_main
    assert as_main(monkeypatch, main)


def test_other_programs_are_not(monkeypatch):
    from fairseq_noising.cli.preview import cli_main

    ours = types.ModuleType("__main__")
    ours.cli_main = cli_main  # fairseq-noise-preview, which ends on its errors itself
    assert not as_main(monkeypatch, ours)
    assert not as_main(monkeypatch, sys.modules["__main__"])  # pytest
    assert not as_main(monkeypatch, types.ModuleType("__main__"))  # python -c
