"""The fairseq command this process runs: whether it is one, the ``common`` settings of the
command that builds a model, and the gloo process group it leaves behind.
"""

import atexit
import logging
import sys

import torch.distributed as dist

logger = logging.getLogger(__name__)


def leave_gloo_group_at_exit() -> None:
    """Destroy a gloo process group from an ``atexit`` handler, before Python shuts down.

    fairseq's ``distributed_main`` ends with a barrier and never calls
    ``torch.distributed.destroy_process_group``. The gloo group is then torn down during
    interpreter finalization, which now and then aborts a rank (SIGABRT, exit code 134) after
    training finished: seen once in this project's two-rank CPU test; torch tracks the crash in
    pytorch/pytorch#190489. The handler does the same teardown while the interpreter is whole.
    Other backends are left to fairseq and torch as they are.
    """
    atexit.register(_destroy_gloo_group)


def _destroy_gloo_group() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        dist.destroy_process_group()
        logger.info("left the gloo process group before interpreter shutdown")


def running_fairseq_command() -> bool:
    """Whether this process is one of fairseq's commands (``fairseq-train``,
    ``fairseq-hydra-train``, ``fairseq-eval-lm``, ``fairseq-generate``, ... or ``python -m
    fairseq_cli.<command>``), or a process that one started with ``torch.multiprocessing.spawn``.

    Only such a process is a program the plugin may change globally (an exception hook, an
    ``atexit`` handler); a notebook, a sweep driver or a test harness that imports the plugin
    keeps its interpreter as it was. Depends on where fairseq keeps its commands: each is a module
    ``fairseq_cli.<command>`` whose function ``cli_main`` fairseq's ``setup.py`` declares as the
    console script's entry point (``fairseq-train = fairseq_cli.train:cli_main``), so the script
    pip writes for it runs ``from fairseq_cli.train import cli_main`` as ``__main__`` (a spawned
    process runs that script again as its ``__main__``), and ``python -m fairseq_cli.train`` runs
    the module itself as ``__main__``, whose ``__spec__`` names it. Not by the program's name:
    this package's own console scripts are called ``fairseq-noise-*``.
    """
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", "").startswith("fairseq_cli."):
        return True
    entry = getattr(main, "cli_main", None)
    return (getattr(entry, "__module__", None) or "").startswith("fairseq_cli.")


def command_common_config(model_cfg):
    """The ``common`` settings (``--cpu``, ``--fp16``, ``--bf16``, ...) of the command that builds
    a model from ``model_cfg``, or None where they cannot be told.

    Depends on ``fairseq_cli.train.main`` calling ``task.build_model(cfg.model)`` with a node of
    its whole OmegaConf config, whose parent (OmegaConf's ``_get_parent``) is the root holding
    ``common``; an argparse model config (``--arch`` of a model without a dataclass) is the whole
    Namespace, ``common``'s flags included.
    """
    get_parent = getattr(model_cfg, "_get_parent", None)
    root = get_parent() if get_parent is not None else None
    if root is not None and "common" in root:
        return root.common
    return model_cfg if hasattr(model_cfg, "fp16") else None
