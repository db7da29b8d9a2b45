"""What the benchmarks share (bench/README.md says what)."""

import argparse
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from functools import partial
from pathlib import Path

from fairseq_noising.data_prep import ptb

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_noising"
GRACE = 5.0  # s between SIGTERM and SIGKILL when processes are stopped
BATCH, BPTT = 20, 35  # Zaremba et al.'s PTB batches
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def parser(prog: str, doc: str, device=False) -> argparse.ArgumentParser:
    """A benchmark's parser: its docstring's first line, --ptb-dir, --cache-dir, --device."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ptb = Path(os.environ.get("FAIRSEQ_NOISING_SHARED") or REPO.parent / "shared" / "data") / "ptb"
    parser.add_argument("--ptb-dir", type=Path, default=ptb, help="ptb.*.txt (%(default)s)")
    cache = Path(tempfile.gettempdir()) / "fairseq-noising-bench"
    parser.add_argument("--cache-dir", type=Path, default=cache, help="binarized (%(default)s)")
    if device:
        parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    return parser


def device(asked, prog: str) -> str:
    """``asked``, else cuda where torch sees a GPU, else cpu; exits if cuda is asked without one."""
    import torch

    if asked == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{prog}: error: --device cuda but torch {torch.__version__} sees no GPU")
    return asked or ("cuda" if torch.cuda.is_available() else "cpu")


def binarized_ptb(ptb_dir: Path, cache_dir: Path) -> Path:
    """PTB binarized once, in ``cache_dir``/ptb-bin-<hash of the text files>; exits if one lacks."""
    try:
        ptb_dir = ptb.check(ptb_dir)
    except ptb.Missing as e:
        sys.exit(f"error: --ptb-dir {e.folder} lacks {e.name} (or set FAIRSEQ_NOISING_SHARED)")
    text = b"".join((ptb_dir / name).read_bytes() for name in ptb.FILES)
    out = Path(cache_dir) / f"ptb-bin-{hashlib.blake2b(text, digest_size=8).hexdigest()}"
    if not ptb.is_binarized(out):
        print(f"binarizing PTB into {out} ...", flush=True)
        try:
            ptb.binarize(ptb_dir, out)
        except OSError:  # another run finished first
            if not ptb.is_binarized(out):
                raise
    return out


def ptb_train_stream(data_bin: Path):
    """(tokens int64 [N], dictionary with <blank>, dataset) of PTB train as the LM task sees it."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_noising.noiser_factory import add_blank
    from fairseq_noising.stats_cache import read_token_stream

    dictionary = Dictionary.load(str(data_bin / "dict.txt"))
    add_blank(dictionary)
    dataset = data_utils.load_indexed_dataset(str(data_bin / "train"), dictionary, "mmap")
    return read_token_stream(dataset)[0], dictionary, dataset


def ptb_batches(tokens):
    """The authors' ``_reshape_data`` + ``get_batch``: (X, Y [shifted by one]) [BATCH, BPTT]."""
    n = tokens.shape[0] // BATCH
    data = tokens[: BATCH * n].reshape(BATCH, n)
    windows = [slice(i * BPTT, (i + 1) * BPTT) for i in range((n - 1) // BPTT)]
    return [(data[:, w], data[:, w.start + 1 : w.stop + 1]) for w in windows]


def alternate(steps, rounds, per_round=1, warmup=1, sync=lambda: None):
    """Seconds of each round of ``per_round`` calls of each step, after ``warmup`` calls; ABBA."""
    for step in [step for step in steps.values() for _ in range(warmup)]:
        step()
    times = {name: [] for name in steps}
    for r in range(rounds):
        for name in list(steps)[:: 1 if r % 2 == 0 else -1]:
            sync()
            start = time.perf_counter()
            for _ in range(per_round):
                steps[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


def fairseq_task(argv):
    """The config and the task of fairseq-train's ``argv`` (the plugin registered first)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the plugin before parsing)

    parsed = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(parsed)
    return cfg, tasks.setup_task(cfg.task)


def paired_updates(argv, updates, warmup, batch, examples, repeats=1):
    """One Trainer's updates, wrapped and clean alternating: times, tokens, wrapper's cost, len."""
    import numpy as np
    from fairseq import utils
    from fairseq.trainer import Trainer

    cfg, task = fairseq_task(argv)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task.load_dataset("train", epoch=1)
    wrapped, model = task.dataset("train"), task.build_model(cfg.model)
    clean, trainer = wrapped.dataset, Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    steps, tokens = {}, {"wrapped": [], "clean": []}
    for name, dataset in (("wrapped", wrapped), ("clean", clean)):
        task.datasets["train"] = dataset
        epoch = trainer.get_train_iterator(epoch=1, load_dataset=False)
        steps[name] = partial(_update, trainer, epoch.next_epoch_itr(), tokens[name])
    task.datasets["train"] = wrapped
    times = alternate(steps, updates, 1, warmup)
    ids, cost = list(range(0, len(clean), max(1, len(clean) // examples)))[:examples], []
    for batch_ids in [ids[i : i + batch] for i in range(0, len(ids), batch)] * repeats:
        t0 = time.perf_counter()
        clean.collater([clean[i] for i in batch_ids])
        t1 = time.perf_counter()
        wrapped.collater([wrapped[i] for i in batch_ids])
        cost.append((time.perf_counter() - t1) - (t1 - t0))
    return times, tokens, statistics.median(cost), len(epoch)


def _update(trainer, batches, tokens):
    batch = next(batches)
    trainer.train_step([batch])
    source, target = batch["net_input"]["src_tokens"], batch["target"]
    lengths = batch["net_input"].get("src_lengths", source.new_zeros(1))
    tokens.append(  # pieces, and the padded batch's cells that the layers compute over
        {"target": int(batch["ntokens"]), "source": int(lengths.sum())}
        | {"padded target": target.numel(), "padded source": source.numel()}
        | {"source x target": source.size(1) * target.size(1)}  # attention's cells a sentence
    )


def cli(name: str) -> str:  # a console script of this interpreter's environment
    return str(Path(sys.executable).parent / name)


def start(cmd, env=None, cwd=REPO, stdout=subprocess.PIPE) -> subprocess.Popen:
    """``cmd`` in a process group of its own (what it starts goes with it), stderr into stdout."""
    kwargs = dict(cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT, text=True)
    return subprocess.Popen([str(a) for a in cmd], start_new_session=True, **kwargs)


def stop(procs) -> None:
    """SIGTERM to each process group, SIGKILL to what is left GRACE seconds later; waits."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with suppress(ProcessLookupError):  # the whole group is gone
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + GRACE
        for proc in procs:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))


def machine_line() -> str:
    when, load = time.strftime("%Y-%m-%d %H:%M:%S %Z"), "%.2f %.2f %.2f" % os.getloadavg()
    return f"{when}  cpus={os.cpu_count()}  loadavg={load}  python={sys.version.split()[0]}"
