"""Dependencies point one way: protocol <- storage <- server; client <- pipeline.

The rules are import-linter contracts in pyproject.toml ([tool.importlinter]), checked here by
running ``lint-imports`` (``make lint`` runs it too); what a contract cannot say is checked below.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The repository's folders are installed as subpackages of ``triolog``; importing them by their
# bare folder names works nowhere but a source checkout and collides with other distributions.
FOLDERS = ("broker", "protocol", "config", "client", "pipeline")
CONTRACTS = 9  # the [[tool.importlinter.contracts]] in pyproject.toml


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` run on the ``triolog`` package of the checkout at ``root``, uncached."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120
    )


def test_architecture_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {CONTRACTS} kept, 0 broken." in result.stdout


def test_architecture_contracts_see_through_the_symlinks(tmp_path):
    """triolog/broker etc. are symlinks to the folders: a violation inside one breaks its contract.

    A copy of the checkout whose storage imports the server (relatively, as a module would) and
    trio, whose client imports the tests, and whose election rules import kazoo: lint-imports
    names each of them.
    """
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "triolog", tmp_path / "triolog", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    with open(tmp_path / "broker" / "storage" / "segment.py", "a") as module:
        module.write("\nfrom ..server import app\nimport trio\n")
    with open(tmp_path / "client" / "serde.py", "a") as module:
        module.write("\nimport tests\n")
    with open(tmp_path / "broker" / "cluster" / "election.py", "a") as module:
        module.write("\nimport kazoo\n")

    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    report = " ".join(result.stdout.split())
    # (six: the pipeline's and the cluster's contracts break too, through the client and the storage)
    assert f"Contracts: {CONTRACTS - 6} kept, 6 broken." in report
    assert "triolog.broker.storage is not allowed to import triolog.broker.server" in report
    assert "triolog.broker.storage is not allowed to import trio:" in report
    assert "triolog.client is not allowed to import tests" in report
    # the controller's rules, which must stay pure, and the one module allowed to know kazoo
    assert "triolog.broker.cluster.election is not allowed to import kazoo" in report


def _absolute_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_nothing_imports_the_bare_folder_names():
    """Every module, test and bench script imports ``triolog.broker``, never ``broker``.

    (import-linter sees only the ``triolog`` package, where ``import broker`` is an external one.)
    """
    files = [path for path in ROOT.rglob("*.py") if not {".venv", "build", ".git"} & set(path.relative_to(ROOT).parts)]
    assert len(files) > 100
    violations = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _absolute_imports(path)
        if name.split(".")[0] in FOLDERS
    ]
    assert violations == []
