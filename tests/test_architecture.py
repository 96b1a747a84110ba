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


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, relative imports resolved to absolute names.

    ``from ..server import x`` in broker/storage/log.py is ``broker.server`` (and
    ``broker.server.x``, which may be a module), so a relative import cannot slip past the check.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = list(path.relative_to(root).parts[:-1])  # what a relative import is relative to
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parent = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join(parent + ([node.module] if node.module else []))
            if base:
                names.add(base)
            names.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
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


def test_relative_imports_are_resolved(tmp_path):
    """The checker itself: a relative import from storage into the server is seen as broker.server."""
    module = tmp_path / "broker" / "storage" / "log.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..server import handlers\nfrom . import index\nfrom .segment import LogSegment\n")
    names = _imports(module, tmp_path)
    assert "broker.server" in names and "broker.server.handlers" in names
    assert "broker.storage.index" in names and "broker.storage.segment" in names
    assert any(n.startswith("broker.server") for n in names if n.startswith(tuple(FORBIDDEN["broker/storage"])))
