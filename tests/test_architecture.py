"""Dependencies point one way: protocol <- storage <- server. This walks every import to keep it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package folder -> modules it must never import
FORBIDDEN = {
    "protocol": {"triolog.broker", "triolog.config", "triolog.client", "triolog.pipeline",
                 "trio", "prometheus_client", "structlog", "socket"},
    "config": {"triolog.broker", "triolog.client", "triolog.pipeline", "trio", "prometheus_client"},
    "broker/storage": {"trio", "socket", "prometheus_client", "triolog.broker.server", "triolog.client"},
    # Coordinators decide (groups, producer ids) from requests, a clock and storage callbacks:
    # no event loop, no sockets, no server, no client.
    "broker/coordinator": {"trio", "socket", "prometheus_client", "triolog.broker.server", "triolog.client"},
}
# The repository's folders are installed as subpackages of ``triolog``; importing them by their
# bare folder names works nowhere but a source checkout and collides with other distributions.
FOLDERS = ("broker", "protocol", "config", "client", "pipeline")


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, relative imports resolved to absolute names.

    ``from ..server import x`` in broker/storage/log.py is ``triolog.broker.server`` (and
    ``triolog.broker.server.x``, which may be a module), so a relative import cannot slip past the
    check.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ["triolog", *path.relative_to(root).parts[:-1]]  # what a relative import is relative to
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
    """The checker itself: a relative import from storage into the server is seen as triolog.broker.server."""
    module = tmp_path / "broker" / "storage" / "log.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..server import handlers\nfrom . import index\nfrom .segment import LogSegment\n")
    names = _imports(module, tmp_path)
    assert "triolog.broker.server" in names and "triolog.broker.server.handlers" in names
    assert "triolog.broker.storage.index" in names and "triolog.broker.storage.segment" in names
    assert any(n.startswith("triolog.broker.server") for n in names
               if n.startswith(tuple(FORBIDDEN["broker/storage"])))


def test_nothing_imports_the_bare_folder_names():
    """Every module, test and bench script imports ``triolog.broker``, never ``broker``."""
    files = [path for path in ROOT.rglob("*.py")
             if not {".venv", "build", ".git"} & set(path.relative_to(ROOT).parts)]
    assert len(files) > 100
    violations = [f"{path.relative_to(ROOT)} imports {name}" for path in files for name in _imports(path)
                  if name.split(".")[0] in FOLDERS]
    assert violations == []
