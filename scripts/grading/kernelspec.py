"""Write the ``tfmlib-sandbox`` kernel spec (see ``sandbox_kernel.py``) into a folder on JUPYTER_PATH."""
from __future__ import annotations

import json
import sys
from pathlib import Path

KERNEL_NAME = "tfmlib-sandbox"


def write_kernelspec(jupyter_dir: Path) -> Path:
    """Create ``<jupyter_dir>/kernels/tfmlib-sandbox/kernel.json``; add ``jupyter_dir`` to JUPYTER_PATH."""
    folder = Path(jupyter_dir) / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, str(Path(__file__).resolve().parent / "sandbox_kernel.py"), "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        "interrupt_mode": "signal",
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    return folder
