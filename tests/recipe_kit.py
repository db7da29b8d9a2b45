"""What the tests of the recipes share: running a recipe, reading its pages, fairseq replaced by a
script of outputs (:class:`FakeFairseq`), synthetic fairseq logs, small data of every recipe, and
running a queue of steps in-process (:func:`run_queue`). The fixtures that use them (``fake``,
``no_drawing``, ``data_env``) are in conftest.py.
"""

import importlib.util
import io
import os
import random
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

from conftest import REPO, head_lines, require_shared

RECIPES = REPO / "recipes"
VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests
FAKE_BIN = str(REPO / ".venv" / "bin")  # as the recipes name the programs (shown relative)
H100 = "NVIDIA H100 80GB HBM3"


def load(name):
    spec = importlib.util.spec_from_file_location(name, RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(RECIPES))
# the recipes' Python modules, which the tests import from here (recipes/ is no package)
import analysis_section  # noqa: E402,F401
import mps  # noqa: E402,F401
import paper_tables  # noqa: E402,F401
import recipe_settings  # noqa: E402,F401
import report  # noqa: E402,F401
import results_page  # noqa: E402,F401
import row_status  # noqa: E402,F401
import rows  # noqa: E402
import run_folders  # noqa: E402,F401
import steps  # noqa: E402,F401


def recipe(name, *args, env=None, timeout=600, check=True):
    # tiny models: one intra-op thread per process is faster than two contending ones
    full_env = {**os.environ, "VENV": VENV, "DEVICE": "cpu", **(env or {})}
    full_env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        ["bash", str(RECIPES / name), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{name} {' '.join(args)} exited {proc.returncode}\n--- stdout ---\n"
            f"{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
        )
    return proc


def table_rows(md):
    return [line for line in md.splitlines() if line.startswith("| ")]


def assert_no_machine_path(text):
    """A results page names files relative to the repository, never by this machine's paths."""
    for path in {str(REPO), os.path.realpath(REPO)}:
        assert path not in text, f"{path} on a results page:\n" + "\n".join(
            line for line in text.splitlines() if path in line
        )


def lines_of(capsys):
    return capsys.readouterr().out.splitlines()


# ---------------------------------------------------------------- fairseq replaced by a script


class FakeProcess:
    """What recipes/rows.py sees of a step's process: it has ended, with ``returncode``."""

    def __init__(self, returncode):
        self.returncode = returncode

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode

    def send_signal(self, signum):  # an ended process ignores signals
        pass

    def terminate(self):
        pass

    def kill(self):
        pass


class FakeFairseq:
    """Each command's output is looked up in a script and written where the real command's output
    would go; fairseq-train leaves checkpoints (and, given --stop-time-hours, says the time limit
    stopped it when ``stopped_by_time`` holds its save dir)."""

    def __init__(self):
        self.calls = []  # every command run, in order
        self.envs = []  # the environment of each step's process
        self.train_logs = {}  # save dir -> the log fairseq-train prints
        self.perplexity = {}  # (run dir, split) -> what fairseq-eval-lm / fairseq-validate prints
        self.bleu = {}  # run dir -> (BLEU, tok BLEU or None)
        self.exit_code = 0
        self.failing = {}  # save dir -> exit code of its fairseq-train
        self.stopped_by_time = set()  # save dirs whose training the time budget stops

    def output(self, cmd):
        prog = os.path.basename(cmd[0])
        flags = dict(zip(cmd, cmd[1:]))
        if prog == "fairseq-train":
            save = flags["--save-dir"]
            if save in self.failing:
                return "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n"
            for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
                Path(save, name).write_bytes(b"ckpt")
            log = self.train_logs.get(save, "")
            if "--stop-time-hours" in flags and save in self.stopped_by_time:
                # as fairseq: the limit is checked after an update, then the epoch's summary
                lines = log.splitlines(keepends=True)
                summaries = [i for i, line in enumerate(lines) if "| train | epoch" in line]
                last = summaries[-1] if summaries else len(lines)
                lines.insert(
                    last,
                    "2026-01-01 00:09:00 | INFO | fairseq_cli.train | Stopping training due to "
                    f"cumulative_training_time: 1.2 > stop_time_hours: {flags['--stop-time-hours']} "
                    "hour(s)\n",
                )
                log = "".join(lines)
            return log
        if prog == "fairseq-eval-lm":
            run = os.path.dirname(flags["--path"])
            return eval_lm_output(self.perplexity[(run, flags["--gen-subset"])])
        if prog == "fairseq-validate":
            run = os.path.dirname(flags["--path"])
            ppl = self.perplexity[(run, "valid")]
            return (
                f"2026-01-01 | INFO | valid | valid on 'valid' subset | loss 5.1 | nll_loss 4.2 "
                f"| ppl {ppl} | wps 100 | wpb 300 | bsz 24\n"
            )
        if prog == "fairseq-generate":
            return "S-0\tein Hund\nH-0\t-0.5\tthe dog\nGenerate test with beam=5: BLEU4 = 1.0\n"
        if "score" in cmd:  # prepare_translation.py score
            run = os.path.dirname(flags["--generate-output"])
            Path(flags["--detok"]).write_text(f"detokenized output of {os.path.basename(run)}\n")
            bleu, tok = self.bleu[run]
            out = f"BLEU {bleu}\nBLEU signature nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp\n"
            if tok is not None:
                out += f"tok BLEU {tok}\ntok BLEU signature nrefs:1|case:mixed|eff:no|tok:none\n"
            return out
        return ""

    def popen(self, cmd, stdout, stderr=None, env=None):  # recipes/rows.py's _spawn
        self.calls.append(list(cmd))
        self.envs.append(dict(env or {}))
        stdout.write(self.output(list(cmd)).encode())
        save = dict(zip(cmd, cmd[1:])).get("--save-dir")
        return FakeProcess(self.failing.get(save, self.exit_code))

    def call(self, cmd):  # subprocess.call of the preparation steps
        self.calls.append(list(cmd))
        return self.exit_code


def run_queue(queue, prog="t.sh", *extra):
    """recipes/rows.py on a queue file, in-process (status lines only at the end)."""
    return rows.main(["--queue", str(queue), "--prog", prog, "--every", "1000", *extra])


def eval_lm_output(ppl):
    return f"2026-01-01 | INFO | fairseq_cli.eval_lm | Loss (base 2): 7.0, Perplexity: {ppl}\n"


def train_log(scheme, gamma, epochs, gpu=None, complete=True):
    """A fairseq-train log (simple format) with the given (train ppl, valid ppl) per epoch (and
    the learning rate, 1 unless the entry has a third element); its wall time at epoch e is
    100 e + 7 s (plus 1000 s for a repeated epoch) and its GPU ``gpu`` (None: a CPU run).
    ``complete``: it ends as paper_halving ends the protocol (its halvings: the rate's drops)."""
    lines = [
        f"2026-01-01 00:00:00 | INFO | fairseq_cli.train | {{'task': {{'_name': "
        f"'noised_language_modeling', 'noise_scheme': '{scheme}', 'noise_gamma': {gamma}}}}}"
    ]
    if gpu:
        lines.append(
            "2026-01-01 00:00:00 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; "
            f"total memory = 79.179 GB ; name = {gpu:40s}"
        )
    seen = set()
    for epoch, (train, valid), *lr in epochs:
        wall = 100 * epoch + 7 + (1000 if epoch in seen else 0)
        seen.add(epoch)
        lines += [
            f"2026-01-01 00:00:01 | INFO | train_inner | epoch {epoch:03d}:     10 / 20 loss=9.1, "
            f"ppl=999.0, ups=2.5, lr={lr[0] if lr else 1}",
            f"2026-01-01 00:00:02 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss 7 | "
            f"nll_loss 7 | ppl {valid} | wps 10 | wpb 470 | bsz 20 | num_updates {epoch * 20}",
            f"2026-01-01 00:00:03 | INFO | train | epoch {epoch:03d} | loss 8 | nll_loss 8 | ppl {train} | "
            f"wps 10 | ups 1 | wpb 530 | bsz 20 | num_updates {epoch * 20} | lr {lr[0] if lr else 1} | "
            f"gnorm 1 | wall {wall}",
        ]
    if complete:
        rates = [float(lr[0]) if lr else 1.0 for _, _, *lr in epochs]
        drops = sum(b < a for a, b in zip(rates, rates[1:]))
        lines.append(
            f"2026-01-01 00:00:04 | INFO | fairseq_noising.optim.paper_halving | paper_halving: "
            f"epoch {epochs[-1][0] + 1}: valid loss 9 does not improve on 7 (epoch 1); stop: all "
            f"{drops} halvings done: lr {rates[-1]:g} -> 0, training stops (--stop-min-lr)"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- small data of every recipe


def synthetic_text8(n_chars, seed=0, vocab=400):
    """A text8-shaped stream: lower-case words, single spaces, one line, no final newline,
    a leading space (as text8 has), Zipf-distributed words so that many are rare."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
        for _ in range(vocab)
    ]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    out, size = [], 0
    while size < n_chars:
        w = rng.choices(words, weights)[0]
        out.append(w)
        size += len(w) + 1
    return (" " + " ".join(out))[:n_chars]


def add_file(tar, name, text):
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def xml_doc(lang, segs, setname):
    body = "\n".join(f'<seg id="{i + 1}"> {s} </seg>' for i, s in enumerate(segs))
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setid="iwslt2015-{setname}" '
        f'srclang="{lang}">\n<doc docid="1" genre="lectures">\n<url>http://www.ted.com/talks/x</url>\n'
        f"<description>TED Talk Subtitles and Transcript: a talk</description>\n"
        f"<talkid>1</talkid>\n<title>A title</title>\n{body}\n</doc>\n</srcset>\n</mteval>\n"
    )


TRAIN_EN = ["Thank you so much, Chris.", "It's truly a great honor.", "And I say that sincerely."]
TRAIN_DE = ["Vielen Dank, Chris.", "Es ist mir wirklich eine Ehre.", "Und das sage ich ernsthaft."]
META = [
    "<url>http://www.ted.com/talks/al_gore</url>",
    "<keywords>talks, climate</keywords>",
    "<speaker>Al Gore</speaker>",
    "<talkid>1</talkid>",
    "<title>Al Gore: Averting</title>",
    "<description>TED Talk Subtitles and Transcript: blah</description>",
]


def tiny_iwslt_tarball(path: Path, pair="de-en"):
    dev = {
        "en": ["Hello &amp; welcome.", "Two &quot;quoted&quot; words."],
        "de": ["Hallo &amp; willkommen.", "Zwei &quot;zitierte&quot; Wörter."],
    }
    tst13 = {"en": ["Wrong set."], "de": ["Falscher Satz."]}
    tst14 = {
        "en": ["Last one.", "Really <i>last</i>?", "Yes."],
        "de": ["Der letzte.", "Wirklich zuletzt?", "Ja."],
    }
    with tarfile.open(path, "w:gz") as tar:
        for lang, lines in (("en", TRAIN_EN), ("de", TRAIN_DE)):
            body = META + lines[:2] + [META[0].replace("al_gore", "next")] + lines[2:] + [""]
            add_file(tar, f"{pair}/train.tags.{pair}.{lang}", "\n".join(body) + "\n")
            for setname, segs in (("tst2012", dev), ("tst2013", tst13), ("tst2014", tst14)):
                add_file(
                    tar,
                    f"{pair}/IWSLT15.TED.{setname}.{pair}.{lang}.xml",
                    xml_doc(lang, segs[lang], setname),
                )
        add_file(tar, f"{pair}/README", "IWSLT 2015\n")
    return path


def make_data_env(tmp_path):
    """Small data of every recipe in tmp_path, and the env variables pointing at them."""
    ptb = require_shared("ptb")
    m30k = require_shared("multi30k")
    ptb_dir = tmp_path / "ptb"
    ptb_dir.mkdir()
    for split, n in (("train", 100), ("valid", 20), ("test", 20)):
        head_lines(ptb / f"ptb.{split}.txt", ptb_dir / f"ptb.{split}.txt", n)
    m_dir = tmp_path / "m30k"
    m_dir.mkdir()
    for split, n in (("train", 200), ("val", 24), ("test", 24)):
        for lang in ("en", "de"):
            # keep the real files' shape: one extra empty line at the end
            lines = (m30k / f"{split}.{lang}").read_text(encoding="utf-8").split("\n")[:n]
            (m_dir / f"{split}.{lang}").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    text8 = tmp_path / "text8"
    text8.write_text(synthetic_text8(12000), encoding="utf-8")
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    return {
        "PTB_DIR": str(ptb_dir),
        "MULTI30K_DIR": str(m_dir),
        "TEXT8": str(text8),
        "IWSLT_TGZ": str(tgz),
        "TRAIN_CHARS": "10000",
        "VALID_CHARS": "1000",
        "TEST_CHARS": "1000",
        "RESULTS_DIR": str(tmp_path / "results"),
    }


def train_flags(out):
    """{flag: value} of every fairseq-train line of a dry run, minus what differs between runs."""
    runs = []
    for line in out.splitlines():
        if line.startswith("+ ") and "fairseq-train" in line:
            args = shlex.split(line[2:])
            flags = dict(zip(args, args[1:] + [None]))
            runs.append(
                {
                    k: (v if v and not v.startswith("--") else None)
                    for k, v in flags.items()
                    if k.startswith("--")
                    and k not in ("--save-dir", "--noise-scheme", "--noise-gamma", "--noise-side")
                }
            )
    return runs
