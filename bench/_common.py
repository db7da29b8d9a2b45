"""What the benchmarks share: their parser, PTB (binarized once, loaded as token ids), a fairseq
Trainer built in-process, timing helpers, starting and stopping processes, the machine line."""

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


def parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its docstring's first line, ``--ptb-dir`` and ``--cache-dir``."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ptb = Path(os.environ.get("FAIRSEQ_NOISING_SHARED") or REPO.parent / "shared" / "data") / "ptb"
    parser.add_argument("--ptb-dir", type=Path, default=ptb, help="ptb.*.txt (%(default)s)")
    cache = Path(tempfile.gettempdir()) / "fairseq-noising-bench"
    parser.add_argument("--cache-dir", type=Path, default=cache, help="binarized (%(default)s)")
    return parser


def device(asked, prog: str) -> str:
    """``asked``, else cuda where torch sees a GPU, else cpu; exits if cuda is asked without one."""
    import torch

    if asked == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{prog}: error: --device cuda but torch {torch.__version__} sees no GPU")
    return asked or ("cuda" if torch.cuda.is_available() else "cpu")


def binarized_ptb(ptb_dir: Path, cache_dir: Path) -> Path:
    """PTB binarized once under ``cache_dir``, in a folder named by a hash of the text files; exits
    with one line naming a missing file."""
    try:
        ptb_dir = ptb.check(ptb_dir)
    except ptb.Missing as e:
        sys.exit(f"error: --ptb-dir {e.folder} lacks {e.name} (or set FAIRSEQ_NOISING_SHARED)")
    digest = hashlib.blake2b(digest_size=8)
    for name in ptb.FILES:
        digest.update((ptb_dir / name).read_bytes())
    out = Path(cache_dir) / f"ptb-bin-{digest.hexdigest()}"
    if not ptb.is_binarized(out):
        print(f"binarizing PTB into {out} ...", flush=True)
        try:
            ptb.binarize(ptb_dir, out)
        except OSError:  # another run finished first
            if not ptb.is_binarized(out):
                raise
    return out


def ptb_train_stream(data_bin: Path):
    """(tokens int64 [N], dictionary, dataset) of binarized PTB train as the noised LM task sees
    them: ``<blank>`` added to the dictionary, one ``</s>`` per line (929,589 tokens)."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_noising.noiser_factory import add_blank
    from fairseq_noising.stats_cache import read_token_stream

    dictionary = Dictionary.load(str(data_bin / "dict.txt"))
    add_blank(dictionary)
    dataset = data_utils.load_indexed_dataset(str(data_bin / "train"), dictionary, "mmap")
    tokens, _ = read_token_stream(dataset)
    return tokens, dictionary, dataset


def alternate(steps, rounds, per_round=1, warmup=1, sync=lambda: None):
    """Seconds of each round of ``per_round`` calls of each step function, after ``warmup`` calls
    each; rounds alternate (ABBA) so that a slow spell of a shared machine hits all alike."""
    for step in steps.values():
        for _ in range(warmup):
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


def ptb_batches(tokens):
    """The authors' ``_reshape_data`` + ``get_batch``: (X, Y) [BATCH, BPTT] of BATCH contiguous
    rows, consecutive windows, Y shifted by one (numpy or torch)."""
    n = tokens.shape[0] // BATCH
    data = tokens[: BATCH * n].reshape(BATCH, n)
    return [
        (data[:, i * BPTT : (i + 1) * BPTT], data[:, i * BPTT + 1 : (i + 1) * BPTT + 1])
        for i in range((n - 1) // BPTT)
    ]


def fairseq_task(argv):
    """The config and the task of fairseq-train's ``argv`` (the plugin registered first)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_noising.fairseq_plugin  # noqa: F401  (registers the plugin before parsing)

    parsed = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(parsed)
    return cfg, tasks.setup_task(cfg.task)


def paired_updates(argv, updates, warmup, batch, examples, repeats=1):
    """fairseq-train's ``argv`` in one Trainer: ``updates`` updates on the wrapped (noised or
    sampled) training set and on the clean one inside it, alternating after ``warmup`` each,
    through fairseq-train's iterators (fetching, collating and the wrapper's work happen in next()).
    Returns the seconds and tokens of each update (``_update``), the median time the wrapper adds to
    fetching and collating a batch (on ``examples`` spread over the split), the epoch's updates."""
    import numpy as np
    from fairseq import utils
    from fairseq.trainer import Trainer

    cfg, task = fairseq_task(argv)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task.load_dataset("train", epoch=1)
    wrapped = task.dataset("train")
    clean = wrapped.dataset
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    steps, tokens = {}, {"wrapped": [], "clean": []}
    for name, dataset in (("wrapped", wrapped), ("clean", clean)):
        task.datasets["train"] = dataset
        epoch = trainer.get_train_iterator(epoch=1, load_dataset=False)
        steps[name] = partial(_update, trainer, epoch.next_epoch_itr(), tokens[name])
    task.datasets["train"] = wrapped
    times = alternate(steps, updates, 1, warmup)
    ids = list(range(0, len(clean), max(1, len(clean) // examples)))[:examples]
    cost = []
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
    tokens.append(
        {  # pieces, and the padded batch's cells that the layers compute over
            "target": int(batch["ntokens"]),
            "source": int(batch["net_input"].get("src_lengths", source.new_zeros(1)).sum()),
            "padded target": target.numel(),
            "padded source": source.numel(),
            "source x target": source.size(1) * target.size(1),  # attention's cells a sentence
        }
    )


def cli(name: str) -> str:
    """A console script of the running interpreter's environment (fairseq-train, ...)."""
    return str(Path(sys.executable).parent / name)


def start(cmd, env=None, cwd=REPO, stdout=subprocess.PIPE) -> subprocess.Popen:
    """``cmd`` in a process group of its own (what it starts goes with it), stderr into stdout."""
    kwargs = dict(stdout=stdout, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return subprocess.Popen([str(a) for a in cmd], cwd=cwd, env=env, **kwargs)


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
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  cpus={os.cpu_count()}  loadavg={load}  "
        f"python={sys.version.split()[0]}"
    )
