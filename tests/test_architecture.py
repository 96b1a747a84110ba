"""Dependencies point one way: protocol <- storage <- server. This walks every import to keep it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> top-level modules it must never import
FORBIDDEN = {
    "protocol": {"broker", "config", "client", "pipeline", "trio", "prometheus_client", "structlog", "socket"},
    "config": {"broker", "client", "pipeline", "trio", "prometheus_client"},
    "broker/storage": {"trio", "socket", "prometheus_client", "broker.server", "broker.tasks", "client"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_architecture_imports_point_one_way(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules found under {package}"
    violations = []
    for path in files:
        for name in _imports(path):
            for banned in FORBIDDEN[package]:
                if name == banned or name.startswith(banned + "."):
                    violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert violations == []
