"""Kafka's own wire protocol, sans-IO: request frames decoded with kio (Kafka's JSON schemas as
Python classes) and translated to and from the broker's internal requests."""

import sys


def _import_kio_without_hypothesis() -> None:
    """kio registers hypothesis strategies for its types whenever hypothesis can be imported:
    0.3 s of every broker's and CLI's start (hypothesis pulls in pytest), for test data the
    broker never makes. So kio is loaded with hypothesis hidden, unless the process already uses
    hypothesis (a test run), where kio's strategies stay available."""
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import hypothesis -> ImportError
    try:
        import kio.static.primitive  # noqa: F401  (its _phantom module tries hypothesis)
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
