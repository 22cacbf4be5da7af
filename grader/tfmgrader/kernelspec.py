"""Write the ``tfmlib-sandbox`` kernel spec (see ``sandbox_kernel.py``) into a folder on JUPYTER_PATH."""
from __future__ import annotations

import json
import sys
from pathlib import Path

KERNEL_NAME = "tfmlib-sandbox"


def write_kernelspec(jupyter_dir: Path, sandboxed: bool = True, env: dict | None = None) -> Path:
    """Create ``<jupyter_dir>/kernels/tfmlib-sandbox/kernel.json`` (a folder for JUPYTER_PATH or a
    KernelSpecManager).  ``sandboxed=False`` is the instructor's explicit opt-out (no bubblewrap)."""
    folder = Path(jupyter_dir) / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    launcher = [sys.executable, str(Path(__file__).resolve().parent / "sandbox_kernel.py")]
    spec = {
        "argv": launcher + ([] if sandboxed else ["--unsandboxed"]) + ["{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        "interrupt_mode": "signal",
        "env": dict(env or {}),
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    return folder
