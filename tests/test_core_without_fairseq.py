"""The noising mathematics imports and runs without fairseq; the plugin still registers with it."""

import re
import subprocess
import sys
import textwrap

import pytest
from conftest import PLUGIN_DIR, REPO

pytestmark = pytest.mark.slow  # each test starts a fresh interpreter

# a meta-path finder that makes the named top-level packages unimportable
_BLOCK = """
import sys
class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, _Blocked())
"""


def _run(blocked, body):
    code = f"BLOCKED = {set(blocked)!r}\n{_BLOCK}\n{textwrap.dedent(body)}"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _readme_python_snippet():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### In any PyTorch training loop (no fairseq)", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_core_imports_with_numpy_alone():
    out = _run(
        {"fairseq", "torch", "omegaconf", "hydra"},
        """
        import numpy as np
        from fairseq_noising import ngram_stats, noiser, schemes
        stats = ngram_stats.stream_stats(np.array([1, 2, 3, 1, 2, 4]), 5)
        scheme = schemes.build_scheme("kn", stats, 0.5, special_ids=[0])
        out = noiser.Noiser(scheme, seed=3)(
            np.array([[1, 2, 3]]), np.array([[2, 3, 1]]), ids=[0], positions=np.arange(3)[None], epoch=1
        )
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fairseq", "torch"))
        print("LOADED", loaded, out.context.shape)
        """,
    )
    assert "LOADED [] (1, 3)" in out


def test_analysis_imports_without_fairseq():
    out = _run(
        {"fairseq", "omegaconf", "hydra"},
        """
        from fairseq_noising.analysis import divergence, logs, ngrams, plots, pseudocounts
        print("OK", sorted(m for m in sys.modules if m.split(".")[0] == "fairseq"))
        """,
    )
    assert "OK []" in out


def test_subword_sampling_imports_with_numpy_and_sentencepiece_alone(tmp_path):
    out = _run(
        {"fairseq", "torch", "omegaconf", "hydra"},
        f"""
        import numpy as np
        import sentencepiece as spm
        from fairseq_noising.subword import SubwordModel, SubwordSampler
        text = {str(tmp_path / "text.txt")!r}
        open(text, "w").write("\\n".join(["a low lower lowest newer newest"] * 50))
        spm.SentencePieceTrainer.train(input=text, model_prefix=text[:-4], vocab_size=25,
                                       hard_vocab_limit=False, minloglevel=2)
        model = SubwordModel(text[:-4] + ".model")
        symbols = ["<s>", "<pad>", "</s>", "<unk>"] + model.dictionary_symbols()
        tables = model.map_dictionary(symbols, [0, 1, 2, 3], 3, "dict.txt")
        sampler = SubwordSampler(model, *tables, alpha=0.5)
        out = sampler([np.arange(4, 12)], [0], epoch=1)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fairseq", "torch"))
        print("LOADED", loaded, len(out))
        """,
    )
    assert "LOADED [] 1" in out


def test_readme_plain_pytorch_example_runs_without_fairseq():
    """The README's snippet runs as printed, fairseq unimportable, and noises at kn's rates.

    Oracle: gamma(x) = 0.2 N1+(x, .) / c(x) and q(y) = N1+(., y) / N1+(., .) counted by brute
    force over the snippet's training stream; a position changes with probability
    gamma(x) (1 - q(original)), for the context and (kn) the target alike.
    """
    out = _run(
        {"fairseq", "omegaconf", "hydra"},
        _readme_python_snippet()
        + textwrap.dedent(
            """
            from collections import Counter
            stream = train.tolist()
            pairs = set(zip(stream[:-1], stream[1:]))
            successors, predecessors = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
            count = Counter(stream[:-1])
            gamma = lambda x: min(1.0, 0.2 * successors[x] / count[x])
            q = lambda y: predecessors[y] / len(pairs)
            assert inputs.shape == targets.shape == (20, 35)
            batch = torch.from_numpy(train[: 2000 * 36].reshape(2000, 36))  # more rows, tighter test
            inputs, targets = noised(batch, example_ids=torch.arange(2000), epoch=1)
            x, y = batch[:, :-1].reshape(-1).tolist(), batch[:, 1:].reshape(-1).tolist()
            for name, noised, clean in (("context", inputs, x), ("target", targets, y)):
                expected = sum(gamma(a) * (1 - q(b)) for a, b in zip(x, clean)) / len(x)
                seen = float((noised.reshape(-1) != torch.tensor(clean)).float().mean())
                print(name, seen, expected, (expected / len(x)) ** 0.5)
            """
        ),
    )
    for line in out.strip().splitlines()[-2:]:
        name, seen, expected, sigma = line.split()
        assert abs(float(seen) - float(expected)) < 4 * float(sigma) + 1e-9, line
        assert float(seen) > 0, line


@pytest.mark.parametrize(
    "first, alone",
    [(None, 5), ("fairseq_noising.data.stateful_bptt_dataset", 0), ("fairseq_noising.models", 2)],
)
def test_user_dir_still_registers_everything(first, alone):
    """--user-dir registers the tasks, models, scheduler and checkpoint allow-list. When a
    fairseq-side module of the plugin was imported before fairseq, fairseq skips the already
    imported package: what that sub-package holds is registered (``alone``: the models' two
    architectures, nothing for the data), and importing ``fairseq_noising.fairseq_plugin``, as the
    README tells such a process to, registers the rest."""
    out = _run(
        set(),
        f"""
        import argparse
        if {first!r}:
            import importlib
            importlib.import_module({first!r})
        from fairseq import utils
        from fairseq.models import ARCH_MODEL_REGISTRY
        from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
        from fairseq.tasks import TASK_REGISTRY
        def found():
            names = [n for n in ("noised_language_modeling", "noised_translation") if n in TASK_REGISTRY]
            names += [n for n in ("noising_lstm_lm_medium", "noising_lstm_iwslt_en_de") if n in ARCH_MODEL_REGISTRY]
            names += [n for n in ("paper_halving",) if n in LR_SCHEDULER_REGISTRY]
            return len(names)
        utils.import_user_module(argparse.Namespace(user_dir={str(PLUGIN_DIR)!r}))
        print("ALONE", found())
        import fairseq_noising.fairseq_plugin
        import torch
        safe = torch.serialization.get_safe_globals()
        print("FOUND", found(), "SAFE", len(safe) > 0)
        """,
    )
    assert f"ALONE {alone}" in out
    assert "FOUND 5 SAFE True" in out
