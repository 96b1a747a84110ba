"""The compiled core: which implementation of each per-record hot loop this process runs.

The per-record loops (the record codec with the validator's walk, the producer's accumulator and
partitioner, the cleaner's two passes: the modules in ``MODULES``) are each written once,
in Cython's pure-Python mode: the same ``.py`` runs interpreted and is compiled by setup.py into an
extension named ``_<module>_c`` beside it. This module picks one per process:

* the compiled extension when it was built (``pip install`` with a C compiler);
* the pure-Python module when it was not (no compiler, ``CC=false``: the install still succeeds),
  said once, as a WARNING on the ``triolog.core`` logger, at first import (``warning()`` keeps the
  text: the ``triolog`` command silences that logger and says it in its own output instead);
* the pure-Python module when, in a git checkout, the extension is older than its source (a stale
  build never runs; ``make run``/``make test`` rebuild it), also said once;
* the pure-Python module whenever ``TRIOLOG_PURE_PYTHON`` is set to a non-empty value other than
  ``0`` (tests and benchmarks of the fallback, or to rule the extension out when debugging).

Both implementations of a module stay importable in one process (``implementation(name, compiled)``),
which is what the property tests comparing them use. This module sits at the top of the package,
above protocol/, client/ and broker/, because it names modules of each of them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import os
import re
from pathlib import Path
from types import ModuleType

__all__ = [
    "COMPILED",
    "MODULES",
    "PURE_PYTHON_ENV",
    "compiled_available",
    "implementation",
    "stale",
    "status",
    "warning",
]

#: Modules (dotted, below ``triolog``) that have a compiled twin ``_<name>_c`` in the same package,
#: built from the same source. setup.py reads this tuple (it cannot import the package), so it is
#: the one list of what gets compiled: add a module here, one per line, and setup.py builds it.
MODULES = (
    "protocol.record_codec",
    "client.accumulator",
    "client.partitioner",
    "broker.storage.cleaner.cleaner_core",
)
#: Set to a non-empty value other than "0" to run the pure-Python implementations.
PURE_PYTHON_ENV = "TRIOLOG_PURE_PYTHON"

_log = logging.getLogger(__name__)


def _forced_pure() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


_ROOT = __package__  # "triolog"


def compiled_name(name: str) -> str:
    """The import name of the compiled twin of core module ``name`` (``protocol.x`` -> ``triolog.protocol._x_c``)."""
    package, _, module = name.rpartition(".")
    return f"{_ROOT}.{package}._{module}_c"


#: The triolog package's folder, holding its packages (protocol/, client/, broker/ ...: symlinks
#: into the repository in a checkout, real folders in an installed wheel). Extensions are looked
#: for here by file name, so deciding which core runs imports none of them.
_TREE = Path(__file__).resolve().parent

#: The repository root when this module runs from a git checkout (editable install, or run from
#: the tree); None in an installed wheel, where a twin and its source are installed together.
_CHECKOUT = _TREE.parent if (_TREE.parent / ".git").exists() and (_TREE.parent / "setup.py").is_file() else None


def _compiled_file(name: str) -> Path | None:
    package, _, module = name.rpartition(".")
    folder = _TREE.joinpath(*package.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / f"_{module}_c{suffix}"
        if candidate.is_file():
            return candidate
    return None


def stale(name: str) -> bool:
    """Whether, in a checkout, the compiled twin of ``name`` was built before its source last changed.

    Such a twin is never used: it would run yesterday's code under today's source (``make run`` and
    ``make test`` rebuild it; by hand, ``python setup.py build_ext --inplace``). Never true outside
    a checkout: installing a wheel writes the two files in no particular order.
    """
    if _CHECKOUT is None:
        return False
    compiled = _compiled_file(name)
    if compiled is None:
        return False
    source = _CHECKOUT.joinpath(*name.split(".")).with_suffix(".py")
    try:
        built = compiled.stat().st_mtime
        return any(built < path.stat().st_mtime for path in _build_inputs(source, _CHECKOUT))
    except OSError:
        return False


_CIMPORT = re.compile(rf"cython\.cimports\.{_ROOT}\.([\w.]+)\s+import")


def _build_inputs(source: Path, checkout: Path) -> list[Path]:
    """The files a twin is compiled from: its source, its own C declarations (``_<module>_c.pxd``)
    if any, and the declarations of other twins it cimports (a changed one changes the C calls it
    makes into them)."""
    inputs = [source]
    own = source.with_name(f"_{source.stem}_c.pxd")
    if own.exists():
        inputs.append(own)
    for dotted in _CIMPORT.findall(source.read_text(encoding="utf-8")):
        declarations = checkout.joinpath(*dotted.split(".")).with_suffix(".pxd")
        if declarations.exists():
            inputs.append(declarations)
    return inputs


def compiled_available(name: str) -> bool:
    """Whether the compiled extension of ``name`` was built (and, in a checkout, is not stale)."""
    return _compiled_file(name) is not None and not stale(name)


def implementation(name: str, compiled: bool) -> ModuleType:
    """The compiled (``compiled=True``) or the pure-Python implementation of module ``name``.

    Raises ImportError when the compiled one was asked for and is not built.
    """
    if name not in MODULES:
        raise ValueError(f"{name!r} is not a compiled-core module (those are {', '.join(MODULES)})")
    if not compiled:
        return importlib.import_module(f"{_ROOT}.{name}")
    if not compiled_available(name):
        why = "older than its source (rebuild it)" if stale(name) else "not built"
        raise ImportError(f"the compiled extension {compiled_name(name)} is {why}")
    return importlib.import_module(compiled_name(name))


def _choose() -> tuple[bool, str, str | None]:
    """(compiled?, status line, the warning to give or None)."""
    if _forced_pure():
        return False, f"pure Python ({PURE_PYTHON_ENV} is set)", None
    out_of_date = [name for name in MODULES if stale(name)]
    if out_of_date:
        return (
            False,
            "pure Python (extension out of date)",
            (
                "triolog's compiled core is older than its source in this checkout, so it is not used: the "
                "per-record paths run in pure Python until it is rebuilt (`make run` / `make test` do it; "
                "or `python setup.py build_ext --inplace`); out of date: "
                + ", ".join(compiled_name(name) for name in out_of_date)
            ),
        )
    missing = [name for name in MODULES if not compiled_available(name)]
    if missing:
        return (
            False,
            "pure Python (extension not built)",
            (
                "triolog's compiled core is not built (no C compiler at install time?): the per-record "
                "paths run in pure Python, several times slower; missing: "
                + ", ".join(compiled_name(name) for name in missing)
            ),
        )
    return True, "compiled (Cython)", None


#: Whether this process runs the compiled core; decided once, at first import.
COMPILED, _STATUS, _WARNING = _choose()
if _WARNING is not None:
    # Once per process, at import. A program without logging configured shows it on stderr
    # (logging's last resort); the CLI adds a NullHandler to this logger first (see broker/cli.py).
    _log.warning("%s", _WARNING)


def status() -> str:
    """One line for ``--version`` and health output: which core this process runs."""
    return _STATUS


def warning() -> str | None:
    """Why this process runs pure Python although it was not asked to (the import-time WARNING), or None."""
    return _WARNING


def load(name: str) -> ModuleType:
    """The implementation of module ``name`` this process runs (see ``COMPILED``)."""
    return implementation(name, COMPILED)
