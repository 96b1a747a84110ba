"""client depends on protocol only; trio only in client.aio, so the sync API never imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_layering_client_imports_protocol_but_never_the_broker():
    violations = []
    for path in sorted((ROOT / "client").rglob("*.py")):
        for name in _imports(path):
            if name.startswith(("triolog.broker", "triolog.config", "tests")) \
                    or (name.split(".")[0] == "trio" and path.name != "aio.py"):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert violations == []


def test_layering_sync_api_does_not_load_trio():
    code = ("import sys; from triolog import client; client.Producer; client.Consumer; client.AdminClient; "
            "print('trio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
