"""How many CUDA devices this machine has: what the GPU benchmarks run on, or the reason they skip."""

from __future__ import annotations


def cuda_device_count() -> int:
    """The CUDA devices torch sees here (0 without a GPU or driver): what the GPU benchmarks run on or skip."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
