"""A baseline to benchmark against: the files of another commit of this repository, exported
with ``git archive`` (its ``triolog/`` links to its own folders), so its code runs from its own
directory beside this checkout's in the same sitting."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_tree(ref: str, into: Path) -> Path:
    """The tree of commit ``ref`` written into the directory ``into`` (created if missing).
    CalledProcessError if git does not know ``ref``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref],
                             capture_output=True, check=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="fully_trusted")
    return into
