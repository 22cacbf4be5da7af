"""Device choice, seeding, and the import cost of tfmlib."""
import subprocess
import sys

import torch

import tfmlib


def test_get_device_override(monkeypatch):
    monkeypatch.setenv("TFMLIB_DEVICE", "cpu")
    assert tfmlib.get_device() == torch.device("cpu")
    monkeypatch.delenv("TFMLIB_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else None
    if expected:
        assert tfmlib.get_device().type == expected
    elif not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        assert tfmlib.get_device() == torch.device("cpu")


def test_seed_everything_repeats():
    g1 = tfmlib.seed_everything(3)
    a = torch.randn(4), torch.randint(0, 100, (3,), generator=g1)
    g2 = tfmlib.seed_everything(3)
    b = torch.randn(4), torch.randint(0, 100, (3,), generator=g2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_import_is_light():
    code = ("import sys, tfmlib; heavy = [m for m in ('matplotlib', 'scipy', 'pandas', 'IPython') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    assert out.stderr == "", out.stderr
