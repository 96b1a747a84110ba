"""Builds the compiled core (protocol/core.py) when it can; everything else is in pyproject.toml.

Each compiled-core module is one pure-Python-mode source, e.g. ``protocol/<name>.py``, compiled by
Cython into the extension ``triolog.protocol._<name>_c`` beside it (the list is ``MODULES`` in
protocol/core.py); the ``.py`` itself is also
installed and is what runs when the extension is absent. The build never fails for want of a C
compiler (or of Cython): it says so and installs the pure-Python package. ``TRIOLOG_PURE_PYTHON=1``
at install time skips the compilation.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _core_modules() -> tuple[str, ...]:
    """``MODULES`` of protocol/core.py, read without importing the package (its dependencies may be absent)."""
    tree = ast.parse(Path(__file__).with_name("protocol").joinpath("core.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("protocol/core.py defines no MODULES")


CORE_MODULES = _core_modules()
PURE_PYTHON_ENV = "TRIOLOG_PURE_PYTHON"


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compilation into a pure-Python install, loudly."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError, CC=false, ...)
            self._fall_back(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # CCompilerError, DistutilsExecError: this one stays pure Python
            self._fall_back(exc, ext.name)

    @staticmethod
    def _fall_back(exc, name="the compiled core"):
        print(
            f"WARNING: triolog: could not compile {name} ({exc}); installing the pure-Python "
            "implementation, which is correct but several times slower on per-record paths",
            file=sys.stderr,
        )


def _extensions():
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        print(f"triolog: {PURE_PYTHON_ENV} is set, not compiling the core", file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("WARNING: triolog: Cython is not installed, not compiling the core", file=sys.stderr)
        return []
    extensions = []
    for name in CORE_MODULES:
        package, _, module = name.rpartition(".")
        extensions.append(Extension(
            f"triolog.{package}._{module}_c", [f"{package.replace('.', '/')}/{module}.py"], optional=True,
        ))
    return cythonize(
        extensions,
        build_dir="build/cython",  # the generated C stays out of the source folders
        compiler_directives={"language_level": 3},
        quiet=True,
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
