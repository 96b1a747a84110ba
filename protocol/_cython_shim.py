"""Stand-in for the ``cython`` module when Cython is not installed (it is a build requirement only).

The compiled-core modules are written in Cython's pure-Python mode: their type declarations are
``cython.*`` decorators and names, which the compiler reads and the interpreter must merely
tolerate. Cython's own ``cython`` module (Shadow.py) does that when present; a runtime without
Cython gets this shim, which accepts the few names those modules use and does nothing with them.
"""

from __future__ import annotations

compiled = False


class _Type:
    """A C type name: subscriptable (``const[uchar][::1]``) and callable as a no-op cast."""

    def __getitem__(self, _item):
        return self

    def __call__(self, value):
        return value


_TYPE = _Type()


def __getattr__(name: str):
    """Any other name is a C type (``cython.int``, ``cython.Py_ssize_t``, ``cython.const`` ...)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return _TYPE


def _identity_decorator(*_args, **_kwargs):
    def decorate(function):
        return function

    return decorate


locals = boundscheck = wraparound = cdivision = _identity_decorator


def cast(_type, value):
    return value
