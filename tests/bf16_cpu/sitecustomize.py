"""On the PYTHONPATH of a command a test runs on a CPU without bf16 units (the ``bf16_cpu`` fixture,
tests/conftest.py): the CPU's flags, as ``torch.cpu.get_capabilities`` reads them and ``--precision
bf16`` checks them before training, include AVX512-BF16, and oneDNN is off (its bf16 LSTM needs the
units: "could not create a primitive descriptor"), so that PyTorch's own kernels emulate bf16
training: a bf16 run's behaviour is tested on any CPU. Nothing in PyTorch's CPU kernels reads the
Python mapping of the flags."""

import types

import torch

_flags = torch.cpu.get_capabilities()
torch.cpu.get_capabilities = lambda: types.MappingProxyType({**_flags, "avx512_bf16": True})
torch.backends.mkldnn.enabled = False
