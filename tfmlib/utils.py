"""Device choice, seeding and argument checks shared by every tfmlib module."""
from __future__ import annotations

import os
import random

import torch


def get_device() -> torch.device:
    """The device tfmlib runs on: CUDA, then Apple's MPS, then the CPU.

    The environment variable ``TFMLIB_DEVICE`` (for example ``cpu`` or ``cuda:1``)
    overrides the choice, so a chapter written for a GPU still builds on a laptop.
    """
    forced = os.environ.get("TFMLIB_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy (when installed) and PyTorch; return a CPU generator seeded the same.

    Two runs of a chapter after ``seed_everything(0)`` print the same numbers on the same machine.
    """
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional for tfmlib itself
        pass
    else:
        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


def check_tensor(name: str, x, min_dim: int = 1) -> None:
    """Raise ValueError unless ``x`` is a tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}")


def check_mask(mask, target_shape: tuple, name: str = "mask") -> None:
    """Raise ValueError unless ``mask`` is boolean and broadcasts to ``target_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            f"convert with `{name} = {name}.bool()` if 1 means 'may attend'"
        )
    try:
        shape = torch.broadcast_shapes(tuple(mask.shape), tuple(target_shape))
    except RuntimeError:
        shape = None
    if shape != tuple(target_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape {tuple(target_shape)}"
        )
