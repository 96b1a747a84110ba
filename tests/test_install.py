"""Installs everywhere: a fresh clone installs with and without a C compiler, and says which core runs.

``test_a_fresh_clone_installs_without_a_compiler_and_with_one`` copies the tracked files (what a
clone holds) into a temporary directory and installs them the way a user would, into a fresh
virtual environment: first ``CC=false pip install .`` (no compiler: the install succeeds, pure
Python, one WARNING at import), then ``pip install .`` again where this machine has a compiler
(the extension is built and runs). It needs PyPI (the build requirements go into pip's isolated
build environment, the dependencies into the new environment; pip's cache makes it fast): marked
``network``, deselect it offline with ``-m 'not network'``.

The stale-extension guard of triolog/core.py (a checkout never runs a twin older than its source)
is checked on copies of this checkout, offline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.checkout import tracked_copy
from triolog import core

ROOT = Path(__file__).resolve().parent.parent
COMPILER = (sysconfig.get_config_var("CC") or "cc").split()[0]
HAS_COMPILER = shutil.which(COMPILER) is not None


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOLOG_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "CC", "PIP_NO_INDEX")}
    return {**env, **extra}


def _python(venv: Path, code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=120)


#: Imports the core as the broker does, walks a two-record batch (bytes made here, so the walk needs
#: nothing else of the package), prints what runs.
PROBE = """
import logging
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
from triolog import core
walk = core.load("protocol.record_codec").walk_records
records = bytes.fromhex("{records}")
print(core.COMPILED, "|", core.status(), "|", walk(records, 0, 2, 7), "|", walk.__module__)
import triolog.core as c, os
print(os.path.dirname(c.__file__))
"""


def _probe() -> tuple[str, tuple]:
    """The records of a real two-record batch (after its 61-byte header) and what the walk returns."""
    from triolog.protocol.records import Record, encode_batch

    batch = encode_batch([Record(0, 7, b"k", b"v"), Record(1, 9, None, b"w")])
    records = batch[61:]
    return PROBE.replace("{records}", records.hex()), core.implementation("protocol.record_codec", False).walk_records(
        records, 0, 2, 7)


def _pip_install(venv: Path, clone: Path, *options: str, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                           *options, "."], cwd=clone, env=_clean_env(**env), capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0 and any(sign in done.stdout + done.stderr for sign in (
            "NewConnectionError", "Temporary failure in name resolution", "Network is unreachable")):
        pytest.fail("this test installs from PyPI and PyPI is unreachable here; offline, deselect it with "
                    "-m 'not network'\n" + done.stderr[-2000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.network
def test_a_fresh_clone_installs_without_a_compiler_and_with_one(tmp_path):
    start = time.monotonic()
    clone = tracked_copy(tmp_path / "clone")
    assert not list(clone.rglob("*.so")) and not (clone / "build").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=_clean_env())
    code, expected_walk = _probe()
    elsewhere = tmp_path / "elsewhere"  # not the clone: the installed package must be what imports
    elsewhere.mkdir()

    # No C compiler: the install succeeds, pure Python, and the import says so exactly once.
    _pip_install(venv, clone, CC="false")
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not list((site / "triolog").rglob("_*_c*.so")), "CC=false installed an extension"
    run = _python(venv, code, elsewhere)
    assert run.returncode == 0, run.stderr
    (compiled, status, walked, module), location = (part.strip() for part in run.stdout.splitlines()[0].split("|")), \
        run.stdout.splitlines()[1]
    assert (compiled, status, module) == ("False", "pure Python (extension not built)", "triolog.protocol.record_codec")
    assert walked == str(expected_walk)
    assert Path(location) == site / "triolog"
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING triolog.core "), run.stderr
    assert all(core.compiled_name(name) in warnings[0] for name in core.MODULES), warnings
    # The command-line tool says it too.
    version = subprocess.run([str(venv / "bin" / "triolog"), "--version"], cwd=elsewhere, env=_clean_env(),
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.rstrip().endswith("; core: pure Python (extension not built))"), version.stdout
    without = time.monotonic() - start

    # The same clone, a compiler on the PATH (where this machine has one): the core is compiled.
    if not HAS_COMPILER:
        print(f"\nno C compiler ({COMPILER}) on this machine: only the install without one ran ({without:.0f} s)")
        return
    _pip_install(venv, clone, "--no-deps", "--force-reinstall")
    built = sorted(path.name for path in (site / "triolog").rglob("_*_c*.so"))
    assert len(built) == len(core.MODULES), built
    for extension in (site / "triolog").rglob("_*_c*.so"):  # built without debug information (-g0)
        assert b".debug_info" not in extension.read_bytes(), extension
    run = _python(venv, code, elsewhere)
    assert run.returncode == 0, run.stderr
    compiled, status, walked, module = (part.strip() for part in run.stdout.splitlines()[0].split("|"))
    assert (compiled, status, walked) == ("True", "compiled (Cython)", str(expected_walk))
    assert module != "triolog.protocol.record_codec" and "WARNING" not in run.stderr, (module, run.stderr)
    print(f"\nfresh clone: without a compiler {without:.0f} s, with one {time.monotonic() - start - without:.0f} s; "
          f"{', '.join(built)}")


# -- the stale-extension guard (offline) -------------------------------------------------------


def _built_twin(tmp_path: Path) -> Path:
    """The compiled twin of protocol.record_codec, as built for this interpreter (built here if needed)."""
    if core.compiled_available("protocol.record_codec"):
        return core._compiled_file("protocol.record_codec")
    if not HAS_COMPILER:
        pytest.skip(f"no C compiler ({COMPILER}) here: no extension exists that could be stale")
    build = tracked_copy(tmp_path / "build-here")
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=build, check=True,
                   capture_output=True, timeout=300, env=_clean_env())
    return next((build / "protocol").glob("_record_codec_c*.so"))


@pytest.mark.parametrize("checkout", [True, False], ids=["checkout", "installed-tree"])
def test_an_extension_older_than_its_source_never_runs_in_a_checkout(tmp_path, checkout):
    twin = _built_twin(tmp_path)
    tree = tracked_copy(tmp_path / "tree")
    if checkout:
        (tree / ".git").mkdir()  # what makes a tree a checkout (a worktree has a .git file)
    else:
        (tree / "setup.py").unlink()  # an installed triolog/: no setup.py, no .git beside it
    for name in core.MODULES:  # every twin built (the other modules' as they are here, up to date)
        if name != "protocol.record_codec":
            other = core._compiled_file(name)
            assert other is not None, f"{name} is not built here: run python setup.py build_ext --inplace"
            shutil.copy2(other, tree.joinpath(*name.split(".")[:-1]) / other.name)
    copied = tree / "protocol" / twin.name
    shutil.copy2(twin, copied)
    source = tree / "protocol" / "record_codec.py"
    older = source.stat().st_mtime - 60
    os.utime(copied, (older, older))  # built, then the source was edited (or checked out)
    code, expected = _probe()
    venv = Path(sys.prefix)
    run = _python(venv, code, tree)
    assert run.returncode == 0, run.stderr
    compiled, status, walked, module = (part.strip() for part in run.stdout.splitlines()[0].split("|"))
    assert walked == str(expected)
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    if checkout:
        assert (compiled, status, module) == ("False", "pure Python (extension out of date)",
                                              "triolog.protocol.record_codec")
        assert len(warnings) == 1 and "older than its source" in warnings[0] and "build_ext --inplace" in warnings[0]
        assert "_record_codec_c" in warnings[0]
    else:  # file times mean nothing in an install: the twin runs
        assert (compiled, status) == ("True", "compiled (Cython)") and warnings == [], run.stderr
    # Rebuilt (here: the twin newer than its source again), it runs.
    newer = source.stat().st_mtime + 60
    os.utime(copied, (newer, newer))
    run = _python(venv, code, tree)
    assert run.returncode == 0 and run.stdout.split("|")[:2] == ["True ", " compiled (Cython) "], run.stdout + run.stderr
