"""Installs everywhere: a fresh clone installs with and without a C compiler, and says which core runs.

``test_a_fresh_clone_installs_without_a_compiler`` copies the tracked files (what a clone holds)
into a temporary directory and installs them the way a user would, into a fresh virtual
environment, with ``CC=false pip install .``: no compiler, the install succeeds, pure Python, one
WARNING at import. The install with a compiler is tests/ops/test_image.py's: the image's builder
step compiles a wheel from a clean copy, which a fresh environment installs and runs (one
compilation of the core per run of the suite, not two). It needs PyPI (the build requirements go into pip's isolated
build environment, the dependencies into the new environment; pip's cache makes it fast): marked
``network``, deselect it offline with ``-m 'not network'``.

The stale-extension guard of triolog/core.py (a checkout never runs a twin older than its source)
is checked on copies of this checkout, offline: the refusal with twins that are not even loadable
(so it runs with or without a compiler), the running of an up-to-date or installed twin with the
twins built here (which needs a compiler: ``CC=false`` or none on the PATH skips only that).

Where the core's warning goes is checked on a copy without twins (a clone installed without a
compiler): once on stderr for a program that imports triolog, never on a command's stderr, in
``--version``, and once in the broker's startup log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.checkout import c_compiler_works, core_probe, tracked_copy
from tests.waiting import wait_for
from triolog import core

ROOT = Path(__file__).resolve().parent.parent
#: The compiler a build here uses ($CC, else the interpreter's), and whether it compiles: CC=false says no.
COMPILER = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
HAS_COMPILER = c_compiler_works()
NO_COMPILER = f"no working C compiler here (CC={COMPILER!r})"


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without triolog's own settings (CC stays: the compiler is the machine's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOLOG_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_INDEX")}
    return {**env, **extra}


def _python(venv: Path, code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=120)


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
def test_a_fresh_clone_installs_without_a_compiler(tmp_path):
    start = time.monotonic()
    clone = tracked_copy(tmp_path / "clone")
    assert not list(clone.rglob("*.so")) and not (clone / "build").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=_clean_env())
    code, expected_walk = core_probe()
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
    print(f"\nfresh clone without a compiler: installed and ran in {time.monotonic() - start:.0f} s")


# -- the stale-extension guard (offline) -------------------------------------------------------


def _tree(tmp_path: Path, checkout: bool) -> Path:
    """A copy of this checkout: a git checkout (``.git``), or laid out like an installed triolog/."""
    tree = tracked_copy(tmp_path / "tree")
    if checkout:
        (tree / ".git").mkdir()  # what makes a tree a checkout (a worktree has a .git file)
    else:
        (tree / "setup.py").unlink()  # an installed triolog/: no setup.py, no .git beside it
    return tree


def _twin_path(tree: Path, name: str) -> Path:
    package, _, module = name.rpartition(".")
    return tree.joinpath(*package.split(".")) / f"_{module}_c{sysconfig.get_config_var('EXT_SUFFIX')}"


def _set_mtime(path: Path, reference: Path, delta: float) -> None:
    when = reference.stat().st_mtime + delta
    os.utime(path, (when, when))


def _run_probe(tree: Path) -> tuple[tuple[str, ...], list[str], str]:
    code, expected = core_probe()
    run = _python(Path(sys.prefix), code, tree)
    assert run.returncode == 0, run.stdout + run.stderr
    compiled, status, walked, module = (part.strip() for part in run.stdout.splitlines()[0].split("|"))
    assert walked == str(expected)
    return (compiled, status, module), [line for line in run.stderr.splitlines() if line.startswith("WARNING")], \
        run.stderr


def test_a_twin_older_than_its_source_is_never_loaded_in_a_checkout(tmp_path):
    """Every twin present, record_codec's older than its source: pure Python, one WARNING naming it.
    The twins here are files that are no extension at all, so had the guard let one be imported the
    probe would fail: the decision is taken from file times alone (no compiler needed)."""
    tree = _tree(tmp_path, checkout=True)
    for name in core.MODULES:
        twin = _twin_path(tree, name)
        twin.write_bytes(b"not an extension: importing this fails\n")
        source = tree.joinpath(*name.split(".")).with_suffix(".py")
        _set_mtime(twin, source, -60 if name == "protocol.record_codec" else +60)
    (compiled, status, module), warnings, stderr = _run_probe(tree)
    assert (compiled, status, module) == ("False", "pure Python (extension out of date)", "triolog.protocol.record_codec")
    assert len(warnings) == 1 and "older than its source" in warnings[0] and "build_ext --inplace" in warnings[0]
    assert "_record_codec_c" in warnings[0] and "_accumulator_c" not in warnings[0], warnings


def test_a_twin_older_than_declarations_it_cimports_is_stale(tmp_path):
    """The cleaner's twin calls the codec's C varint readers through protocol/_record_codec_c.pxd:
    newer than its own source but older than those declarations, it was built against other C
    calls and is refused; the codec's twin, newer than both, is not."""
    tree = _tree(tmp_path, checkout=True)
    declarations = tree / "protocol" / "_record_codec_c.pxd"
    for name in core.MODULES:
        twin = _twin_path(tree, name)
        twin.write_bytes(b"not an extension: importing this fails\n")
        _set_mtime(twin, tree.joinpath(*name.split(".")).with_suffix(".py"), +60)
    _set_mtime(declarations, _twin_path(tree, "broker.storage.cleaner.cleaner_core"), +30)
    # Newer than its source and its declarations, whatever the checkout's file times are.
    codec_source = tree / "protocol" / "record_codec.py"
    newest = max((declarations, codec_source), key=lambda path: path.stat().st_mtime)
    _set_mtime(_twin_path(tree, "protocol.record_codec"), newest, +30)
    code = ("from triolog import core; "
            "print(core.stale('broker.storage.cleaner.cleaner_core'), core.stale('protocol.record_codec'))")
    run = _python(Path(sys.prefix), code, tree)
    assert (run.returncode, run.stdout.split()) == (0, ["True", "False"]), run.stderr


def _built_twins(tmp_path: Path) -> dict[str, Path]:
    """The compiled twin of every core module, as built for this interpreter (built here if needed)."""
    if all(core.compiled_available(name) for name in core.MODULES):
        return {name: core._compiled_file(name) for name in core.MODULES}
    if not HAS_COMPILER:
        pytest.skip(f"{NO_COMPILER}: no twin can be built to run (the refusal of a stale one is "
                    "test_a_twin_older_than_its_source_is_never_loaded_in_a_checkout)")
    build = tracked_copy(tmp_path / "build-here")
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=build, check=True,
                   capture_output=True, timeout=300, env=_clean_env())
    twins = {name: _twin_path(build, name) for name in core.MODULES}
    assert all(twin.is_file() for twin in twins.values()), sorted(p.name for p in build.rglob("*.so"))
    return twins


@pytest.mark.parametrize("checkout", [True, False], ids=["checkout", "installed-tree"])
def test_a_built_twin_runs_when_up_to_date_and_in_an_install_whatever_its_time(tmp_path, checkout):
    twins = _built_twins(tmp_path)
    tree = _tree(tmp_path, checkout)
    for name, twin in twins.items():
        shutil.copy2(twin, _twin_path(tree, name))
    codec_twin = _twin_path(tree, "protocol.record_codec")
    source = tree / "protocol" / "record_codec.py"
    _set_mtime(codec_twin, source, -60)  # built, then the source was edited (or checked out)
    outcome, warnings, stderr = _run_probe(tree)
    if checkout:  # (the refusal itself: test_a_twin_older_than_its_source_is_never_loaded_in_a_checkout)
        assert outcome == ("False", "pure Python (extension out of date)", "triolog.protocol.record_codec")
        assert len(warnings) == 1 and "_record_codec_c" in warnings[0], stderr
    else:  # file times mean nothing in an install: the twin runs
        assert outcome[:2] == ("True", "compiled (Cython)") and warnings == [], stderr
        assert outcome[2] == "triolog.protocol._record_codec_c", outcome
    # Rebuilt (here: the twin newer than its source again), it runs, silently.
    _set_mtime(codec_twin, source, +60)
    outcome, warnings, stderr = _run_probe(tree)
    assert outcome == ("True", "compiled (Cython)", "triolog.protocol._record_codec_c") and warnings == [], stderr


# -- where the fallback is said (offline) ------------------------------------------------------

CORE_WARNING = "triolog's compiled core is not built"


def _in_tree(tree: Path, *args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    """``python ARGS`` run from ``tree`` (its triolog/ is what imports), as a user's process would."""
    return subprocess.run([sys.executable, *args], cwd=tree, input=stdin, capture_output=True, text=True,
                          timeout=timeout, env={**_clean_env(), "PYTHONPATH": str(tree)})


def test_the_pure_python_fallback_is_said_once_where_it_matters_and_never_on_a_commands_stderr(tmp_path):
    """A tree without twins, as after an install without a compiler. A program importing the client
    hears it once on stderr (its logging unconfigured: logging's last resort); the ``triolog``
    command keeps every command's stderr its own and says it in ``--version``, in ``health`` (the
    broker's core) and, once, as a WARNING event of the broker's startup log."""
    tree = tracked_copy(tmp_path / "tree")
    program = _in_tree(tree, "-c", "import triolog.client, triolog.broker.storage.cleaner.cleaner_core; "
                                   "from triolog import core; print(core.status())")
    assert program.returncode == 0 and program.stdout == "pure Python (extension not built)\n", program.stderr
    assert program.stderr.count(CORE_WARNING) == 1 and len(program.stderr.splitlines()) == 1, program.stderr

    version = _in_tree(tree, "-m", "triolog.broker.cli", "--version")
    assert (version.returncode, version.stderr) == (0, "")
    assert version.stdout.rstrip().endswith("; core: pure Python (extension not built))"), version.stdout

    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        broker = subprocess.Popen(
            [sys.executable, "-m", "triolog.broker.cli", "serve", "--override", f"log.dirs={tmp_path / 'data'}",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "metrics.listener=",
             "--override", "kafka.listeners=", "--override", "logger.format=json"],
            cwd=tree, stdout=out, stderr=out, env={**_clean_env(), "PYTHONPATH": str(tree)})
    try:
        def events() -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]

        started = wait_for(lambda: [e for e in events() if e.get("event") == "broker_started"]
                           or broker.poll() is not None, 120, "broker_started")
        assert broker.poll() is None, log.read_text()
        server = ["--bootstrap-server", f"127.0.0.1:{started[0]['port']}"]
        core_events = [e for e in events() if e.get("logger") == "triolog.core"]
        assert [(e["event"], e["level"], e["status"]) for e in core_events] == [
            ("compiled_core", "warning", "pure Python (extension not built)")], core_events
        assert CORE_WARNING in core_events[0]["message"]
        assert all(line.startswith("{") for line in log.read_text().splitlines()), log.read_text()

        cli = ("-m", "triolog.broker.cli")
        health = _in_tree(tree, *cli, "health", *server)
        assert (health.returncode, health.stderr) == (0, ""), health.stdout
        assert ", core: pure Python (extension not built)) answered api_versions" in health.stdout, health.stdout
        created = _in_tree(tree, *cli, "topics", *server, "--create", "--topic", "said-once", "--partitions", "1")
        assert (created.returncode, created.stderr) == (0, ""), created.stdout
        produced = _in_tree(tree, *cli, "produce", *server, "--topic", "said-once", stdin="one\ntwo\n")
        assert (produced.returncode, produced.stderr) == (0, "")
        consumed = _in_tree(tree, *cli, "consume", *server, "--topic", "said-once", "--from-beginning",
                            "--max-messages", "2")
        assert (consumed.returncode, consumed.stdout) == (0, "one\ntwo\n"), consumed.stderr
        assert consumed.stderr == "Processed a total of 2 messages\n", consumed.stderr
    finally:
        broker.terminate()
        broker.wait(60)
