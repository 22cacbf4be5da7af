"""Shared fixtures: every library test runs on each available device (CUDA too, when present)."""
import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Tolerances of the reference comparisons (issue 2): max abs error.
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def max_err(a, b):
    return (a - b).abs().max().item()
