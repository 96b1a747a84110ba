"""Builds the compiled core (triolog/core.py) when it can; everything else is in pyproject.toml.

Each compiled-core module is one pure-Python-mode source, e.g. ``protocol/<name>.py``, compiled by
Cython into the extension ``triolog.protocol._<name>_c`` beside it (the list is ``MODULES`` in
triolog/core.py); the ``.py`` itself is also
installed and is what runs when the extension is absent. The build never fails for want of a C
compiler (or of Cython): it says so and installs the pure-Python package. ``TRIOLOG_PURE_PYTHON=1``
at install time skips the compilation. Every build recompiles (an old ``build/`` is never reused)
and leaves out debug information.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _core_modules() -> tuple[str, ...]:
    """``MODULES`` of triolog/core.py, read without importing the package (its dependencies may be absent)."""
    tree = ast.parse(Path(__file__).with_name("triolog").joinpath("core.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("triolog/core.py defines no MODULES")


CORE_MODULES = _core_modules()
PURE_PYTHON_ENV = "TRIOLOG_PURE_PYTHON"


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compilation into a pure-Python install, loudly.

    It always recompiles (``force``): a ``build/`` directory left by an earlier build would
    otherwise make setuptools skip the compiler and ship that old extension, even under
    ``CC=false``. A module that fails to compile loses its previous extension too (in ``build/``
    and, for in-place and editable builds, beside its source), so no stale twin can run.
    """

    parallel: int | bool | None  # build_ext's -j (declared for the type checker)

    def finalize_options(self):
        super().finalize_options()
        self.force = True
        if not self.parallel:  # unless -j says otherwise: a C compiler per core
            self.parallel = os.cpu_count() or 1

    def run(self):
        self._inplace_wanted = self.inplace  # setuptools builds in build/ first, then copies
        self._failed = []  # (module, error): said once, after all were tried
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError, CC=false, ...)
            self._failed = [("the compiled core", exc)]
            for ext in self.extensions:
                self._remove_outputs(ext)
        if self._failed:
            names = ", ".join(name for name, _ in self._failed)
            print(
                f"WARNING: triolog: could not compile {names} ({self._failed[0][1]}); installing the "
                "pure-Python implementation, which is correct but several times slower on per-record paths",
                file=sys.stderr,
            )

    def build_extensions(self):
        # Cython first, one module at a time in this process (its compiler keeps global state),
        # then the C compiler on every module at once, one per core (``parallel``, as ``-j``).
        self._cythonized = {ext.name for ext in self.extensions if self._cythonize(ext)}
        super().build_extensions()

    def _cythonize(self, ext) -> bool:
        from Cython.Build import cythonize  # _extensions() made sure it imports

        try:
            # Cythonized here, not when setup.py is read: pip reads it several times per install.
            (compiled,) = cythonize(
                [ext],
                build_dir="build/cython",  # the generated C stays out of the source folders
                # cimports between core modules (cleaner_core cimports the codec's varint readers)
                # name them as triolog.<package>.<module>: found through triolog/'s symlinks here
                include_path=[str(Path(__file__).resolve().parent)],
                # warn.unreachable off: `if cython.compiled: ... return` ends in the interpreted
                # fallback, which is unreachable in the compiled twin by design
                compiler_directives={"language_level": 3, "warn.unreachable": False},
                force=True,  # regenerate the C every build: never compile C left from another source
                quiet=True,
            )
        except Exception as exc:  # a CompileError: this one stays pure Python
            self._failed.append((ext.name, exc))
            self._remove_outputs(ext)
            return False
        ext.sources = compiled.sources  # the generated .c in place of the .py
        if self.compiler.compiler_type == "unix" and "-g0" not in ext.extra_compile_args:
            # No debug info (the interpreter's -g made a 1.9 MB module of a 0.3 MB one); after
            # the interpreter's own CFLAGS, so it wins.
            ext.extra_compile_args = [*ext.extra_compile_args, "-g0"]
        return True

    def build_extension(self, ext):
        if ext.name not in self._cythonized:
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # CCompilerError, DistutilsExecError: this one stays pure Python
            self._failed.append((ext.name, exc))
            self._remove_outputs(ext)

    def _remove_outputs(self, ext):
        filename = self.get_ext_filename(self.get_ext_fullname(ext.name))
        stale = [os.path.join(self.build_lib, filename)]
        if getattr(self, "_inplace_wanted", False):
            package = self.get_finalized_command("build_py").get_package_dir(ext.name.rpartition(".")[0])
            stale.append(os.path.join(package, os.path.basename(filename)))
        for path in stale:
            if os.path.exists(path):
                os.remove(path)
                print(f"triolog: removed the stale {path}", file=sys.stderr)


def _extensions():
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        print(f"triolog: {PURE_PYTHON_ENV} is set, not compiling the core", file=sys.stderr)
        return []
    try:
        import Cython.Build  # noqa: F401  (OptionalBuildExt cythonizes each module when it builds it)
    except ImportError:
        print("WARNING: triolog: Cython is not installed, not compiling the core", file=sys.stderr)
        return []
    extensions = []
    for name in CORE_MODULES:
        package, _, module = name.rpartition(".")
        extensions.append(
            Extension(
                f"triolog.{package}._{module}_c",
                [f"{package.replace('.', '/')}/{module}.py"],
                optional=True,
            )
        )
    return extensions


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
