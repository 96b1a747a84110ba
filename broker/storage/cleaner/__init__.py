"""Log compaction (Kafka's log cleaner): offset map, cleaning passes, manager and threads.

The names below are imported on first use (PEP 562), not with the package: the compiled core
(triolog/core.py) imports this package to find ``_cleaner_core_c`` while it is itself being
imported, and the cleaner's modules depend on the storage layer, which depends on the core.
"""

from importlib import import_module

_EXPORTS = {
    "Cleaner": ".cleaner",
    "CleanerStats": ".cleaner",
    "CleanJob": ".cleaner",
    "LogCleaningAbortedError": ".cleaner",
    "LogCleanerManager": ".cleaner_manager",
    "CleanerConfig": ".log_cleaner",
    "CleanerMetrics": ".log_cleaner",
    "LogCleaner": ".log_cleaner",
    "SkimpyOffsetMap": ".offset_map",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
