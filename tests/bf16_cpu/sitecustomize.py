"""On the PYTHONPATH of a command a test runs on a CPU without bf16 units (the ``bf16_cpu`` fixture,
tests/conftest.py, which applies the same patches in the test's own process): the CPU's flags, as
``torch.cpu.get_capabilities`` reads them and ``--precision bf16`` checks them before training,
include AVX512-BF16, and oneDNN is off (its bf16 LSTM needs the units: "could not create a primitive
descriptor"), so that PyTorch's own kernels emulate bf16 training: a bf16 run's behaviour is tested
on any CPU. Nothing in PyTorch's CPU kernels reads the Python mapping of the flags."""

import types


def patches(torch):
    """(object, attribute, value) of each patch."""
    flags = types.MappingProxyType({**torch.cpu.get_capabilities(), "avx512_bf16": True})
    return [
        (torch.cpu, "get_capabilities", lambda: flags),
        (torch.backends.mkldnn, "enabled", False),
    ]


if __name__ == "sitecustomize":  # Python's start-up import, in a command the tests run
    import torch

    for target, name, value in patches(torch):
        setattr(target, name, value)
