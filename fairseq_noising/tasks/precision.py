"""``--precision bf16``: training's forward and backward in bfloat16 under ``torch.autocast``.

The weights, the optimizer and the checkpoints stay fp32: a bf16 row saves, resumes and restores
its best parameters exactly as an fp32 row does, and its checkpoints are evaluated in fp32 by
fairseq-eval-lm, fairseq-generate and the plugin's CLIs. Validation during training runs in fp32
too, so halvings and the best model are chosen on fp32 figures. fairseq's own ``--bf16`` (weights
cast to bf16, and in plain fairseq-train TPU mode) is refused with these tasks; why, and the
measurements behind the choice: ``docs/precision.md``.
"""

import logging
import time
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from ..errors import NoisingError
from ..fairseq_compat import command_common_config

logger = logging.getLogger(__name__)

PRECISION_CHOICES = ChoiceEnum(["fp32", "bf16"])


@dataclass
class PrecisionConfig(FairseqDataclass):
    precision: PRECISION_CHOICES = field(
        default="fp32",
        metadata={
            "help": "bf16: training's forward and backward under torch.autocast in bfloat16 "
            "(CPU or CUDA), with fp32 weights, optimizer and checkpoints; validation and "
            "evaluation in fp32. Needs a CPU with AVX512-BF16 (or AMX) or a GPU with bf16"
        },
    )


# the CPU flags of bfloat16 arithmetic, as torch.cpu.get_capabilities names them (x86, then ARM)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")


def bf16_supported(device: str) -> bool:
    """Whether ``device`` ("cpu" or "cuda") has bfloat16 arithmetic in hardware. On the CPU: its
    flags as cpuinfo reads them (AVX512-BF16 or AMX-BF16; on ARM, BF16); without them PyTorch
    emulates bf16 in software."""
    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    capabilities = torch.cpu.get_capabilities()
    return any(capabilities.get(flag, False) for flag in BF16_CPU_FLAGS)


def check_training(precision: str, model_cfg) -> None:
    """One line, before training, for a precision this machine cannot train in: called with the
    model config fairseq-train builds its model from."""
    common = command_common_config(model_cfg)
    on_cuda = torch.cuda.is_available() and not getattr(common, "cpu", False)
    device = "cuda" if on_cuda else "cpu"
    if getattr(common, "bf16", False) or getattr(common, "memory_efficient_bf16", False):
        raise NoisingError(
            "--bf16 (common.bf16) casts the weights to bfloat16 (and in plain fairseq-train means "
            "TPU training): train in bf16 with --precision bf16 (Hydra: task.precision=bf16), "
            "which keeps fp32 weights and checkpoints"
        )
    if device == "cpu" and any(
        getattr(common, f, False) for f in ("fp16", "memory_efficient_fp16", "amp")
    ):
        raise NoisingError(
            "--fp16 and --amp (common.fp16, common.amp) need a CUDA GPU; on this CPU train in "
            "bf16 with --precision bf16 (Hydra: task.precision=bf16) or leave them out (fp32)"
        )
    if precision == "bf16" and not bf16_supported(device):
        lacks = (
            "a GPU with bfloat16 support"
            if on_cuda
            else "AVX512-BF16 or AMX in its flags (PyTorch would emulate bf16 in software)"
        )
        raise NoisingError(f"--precision bf16 (task.precision=bf16): this {device} lacks {lacks}")
    if precision == "bf16" and device == "cpu":
        speedup = cpu_bf16_speedup()
        if speedup < 1.0:
            logger.warning(
                f"--precision bf16: a bf16 matrix product on this CPU took {1 / speedup:.1f}x "
                "the fp32 time (its bf16 units are no faster than its fp32 ones): "
                "training will be slower than in fp32"
            )


def cpu_bf16_speedup() -> float:
    """fp32 time over bf16 time of one 256 x 1024 x 1024 matrix product on this CPU's thread
    (best of 3 each, about 50 ms in all): above 1 where bf16 pays off."""
    generator = torch.Generator().manual_seed(0)  # the global random state stays as it was
    a = torch.randn(256, 1024, generator=generator)
    b = torch.randn(1024, 1024, generator=generator)
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        x @ y
        times = []
        for _ in range(3):
            start = time.perf_counter()
            x @ y
            times.append(time.perf_counter() - start)
        best[dtype] = min(times)
    return best[torch.float32] / best[torch.bfloat16]


def autocast_forward(precision: str, criterion):
    """``criterion`` itself in fp32; in bf16 a callable that runs it (the model's forward and the
    loss) under ``torch.autocast`` on the device of the model it is given. fairseq's
    ``FairseqTask.train_step`` calls ``criterion(model, sample)`` and then the backward, which
    replays the forward's dtypes outside the autocast region."""
    if precision != "bf16":
        return criterion

    def forward(model, sample, *args, **kwargs):
        device = next(model.parameters()).device.type
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return criterion(model, sample, *args, **kwargs)

    return forward
