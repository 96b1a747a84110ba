"""client depends on protocol only; trio only in client.aio, so the sync API never imports it.

The import rules are import-linter contracts (pyproject.toml, checked by tests/test_architecture.py);
this checks what they cannot: that importing the sync API leaves trio unloaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_layering_sync_api_does_not_load_trio():
    code = (
        "import sys; from triolog import client; client.Producer; client.Consumer; client.AdminClient; "
        "print('trio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
