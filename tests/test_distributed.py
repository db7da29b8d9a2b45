"""Two-rank distributed training with noising: two real ``fairseq-train`` processes, gloo on CPU.

Stock fairseq lowers the root logger of every rank but 0 to WARNING (``distributed_init``), so
rank 1 would never print the plugin's "noising ... with kn" line. The test puts a
``sitecustomize.py`` on the ranks' PYTHONPATH that only sets the ``fairseq_noising`` logger to
INFO (an explicit level on a logger wins over its ancestors'); it changes nothing else.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import TINY_LM, TINY_NOISING_LM, cli, lm_train_argv

from fairseq_noising.stats_cache import cache_path

pytestmark = pytest.mark.slow  # two fairseq-train processes

SITECUSTOMIZE = """\
import logging
logging.getLogger("fairseq_noising").setLevel(logging.INFO)
"""

TIMEOUT = 420  # seconds for both ranks together; ample for a small, shared machine
GRACE = 20  # seconds the other rank gets to exit on its own after one rank failed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# stateful truncated BPTT: each rank owns its own 20 contiguous rows and carries their state
MODELS = [(TINY_LM, []), (TINY_NOISING_LM, ["--stateful-bptt"])]


@pytest.mark.parametrize("model, stateful", MODELS, ids=["stateless", "stateful-bptt"])
def test_two_ranks_train_with_kn_noising(ptb_small_bin, tmp_path, model, stateful):
    data = tmp_path / "data"
    shutil.copytree(ptb_small_bin, data, ignore=shutil.ignore_patterns("*noise?stats*"))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
    }
    save_dir = tmp_path / "ckpt"
    port = free_port()
    train = [*stateful, "--log-interval", 1, "--max-update", 4]
    train += ["--batch-size", 20, "--required-batch-size-multiple", 1]
    train += [
        "--optimizer",
        "adam",
        "--lr",
        0.001,
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
    ]
    train += ["--distributed-world-size", 2, "--distributed-backend", "gloo"]
    train += ["--ddp-backend", "legacy_ddp", "--distributed-no-spawn"]
    train += ["--distributed-init-method", f"tcp://127.0.0.1:{port}"]
    argv = lm_train_argv(data, *train, model=model, scheme="kn", gamma=0.2)
    common = [cli("fairseq-train"), *map(str, argv)]
    procs, logs = [], []
    try:
        for rank in (0, 1):
            out = open(tmp_path / f"rank{rank}.log", "w+")
            logs.append(out)
            procs.append(
                subprocess.Popen(
                    common + ["--distributed-rank", str(rank)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    text=True,
                )
            )
        deadline = time.monotonic() + TIMEOUT
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                # one rank died; the other may still be finishing on its own, or wait forever
                deadline = min(deadline, time.monotonic() + GRACE)
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        texts = []
        for out in logs:
            out.seek(0)
            texts.append(out.read())
            out.close()

    codes = [p.returncode for p in procs]
    # the failing rank's tail first: CI shows only the start of a long message
    order = sorted(range(2), key=lambda r: codes[r] == 0)
    assert codes == [0, 0], (
        f"exit codes {codes} (-9: killed {GRACE} s after the other rank failed, or at {TIMEOUT} s)\n"
        + "\n".join(f"--- rank {r}, last lines ---\n{texts[r][-1500:]}" for r in order)
    )
    rank0, rank1 = texts
    for rank, text in enumerate(texts):
        assert "Traceback" not in text, text[-4000:]
        assert f"as rank {rank}" in text, f"rank {rank} never joined the process group"
        noising = re.findall(r"noising \S+train with (\w+), gamma_0=0\.2", text)
        assert noising == ["kn"], f"rank {rank} did not build its kn noiser:\n{text[-4000:]}"
        # fairseq never destroys the group; the plugin's atexit handler does (fairseq_compat)
        assert "left the gloo process group" in text, f"rank {rank}:\n{text[-1500:]}"

    # rank 0 logs the updates and the validation after the 4th
    updates = [int(n) for n in re.findall(r"train_inner \| .*num_updates=(\d+)", rank0)]
    assert updates == [1, 2, 3, 4], rank0[-4000:]
    # each update aggregates one 20-sentence batch from each rank
    assert re.findall(r"train_inner \| .*bsz=(\d+)", rank0) == ["40"] * 4
    valid = re.search(r"valid on 'valid' subset \| loss (\S+) .*num_updates 4", rank0)
    assert valid, rank0[-4000:]
    assert np.isfinite(float(valid.group(1)))
    assert (save_dir / "checkpoint_last.pt").is_file()

    # both ranks built the statistics; concurrent writes still leave one valid cache
    with np.load(cache_path(str(data / "train")), allow_pickle=False) as arrays:
        assert arrays["unigram"].sum() > 0
    leftovers = [p.name for p in data.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temporary cache files left behind: {leftovers}"


# Registered before the plugin, so it runs after the plugin's handler (atexit is last in, first
# out): what the group looks like when Python starts to shut down.
SHUTDOWN_PROBE = """\
import atexit, sys
import torch
import torch.distributed as dist
atexit.register(lambda: print("initialized at shutdown:", dist.is_initialized(), flush=True))
if sys.argv[1] == "fairseq-command":
    from fairseq_cli.train import cli_main  # noqa: F401  (fairseq-train's script, first line)
if sys.argv[1] in ("fairseq-command", "library"):
    import fairseq  # noqa: F401
    import fairseq_noising  # noqa: F401  (fairseq already imported: runs the plugin)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)
dist.all_reduce(torch.ones(3))
"""


@pytest.mark.parametrize(
    "imports, expected", [("fairseq-command", "False"), ("library", "True"), ("torch-only", "True")]
)
def test_the_plugin_destroys_a_gloo_group_before_python_shuts_down(imports, expected):
    # In a process that is fairseq-train (its script has imported fairseq_cli.train's cli_main),
    # the plugin destroys the group. Elsewhere (a library caller, a test) it registers no atexit
    # handler, so the group is still there at shutdown, as it is without the plugin (torch-only,
    # the control).
    done = subprocess.run(
        [sys.executable, "-c", SHUTDOWN_PROBE, imports, str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert f"initialized at shutdown: {expected}" in done.stdout, done.stdout + done.stderr[-2000:]
    # a gloo group left to the interpreter's shutdown may abort the process there ("terminate
    # called without an active exception"): torch's own behaviour, which the plugin's teardown
    # spares fairseq's commands
    if imports == "fairseq-command":
        assert done.returncode == 0, done.stderr[-2000:]
