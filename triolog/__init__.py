"""triolog: a Kafka-style log broker.

The repository keeps one folder per part (``broker/``, ``protocol/``, ``config/``, ``client/``,
``pipeline/``); installed, they are the subpackages ``triolog.broker``, ``triolog.protocol``, …
(``package-dir`` in pyproject.toml), so that nothing claims a generic top-level name such as
``config`` or ``client`` in an environment shared with other distributions.
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("triolog")
except metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
