"""The security package's durable JSON files, kept like ``triolog-topics.json``: at the root of
the first log directory, replaced whole and atomically, read once at start.

A file that does not parse is an error naming it, never an empty set: no ACLs with
``allow.everyone.if.no.acl.found`` would open the broker, and no users would lock everyone out
without saying why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from triolog.broker.storage.checkpoints import atomic_write
from triolog.broker.storage.errors import CorruptCheckpointError
from triolog.broker.storage.fs import FileSystem, read_file


class CorruptSecurityFileError(CorruptCheckpointError):
    """An ACL or user file that does not parse or holds an invalid entry; the broker must not
    start as if it were empty."""

    def __init__(self, path: os.PathLike | str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)


def load_json(fs: FileSystem, path: Path, kind: str) -> dict | None:
    """The document in ``path`` (None if there is no file); CorruptSecurityFileError if it is
    not a JSON object of a known version."""
    if not fs.exists(path):
        return None
    try:
        doc = json.loads(read_file(fs, path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptSecurityFileError(path, f"not a valid {kind} file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise CorruptSecurityFileError(path, f"not a {kind} file of version 1")
    return doc


def dump_json(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def save_json(fs: FileSystem, path: Path, doc: dict) -> None:
    """Replace ``path`` atomically (checkpoints.atomic_write: temporary file, fsync, rename, fsync
    of the directory)."""
    atomic_write(path, dump_json(doc), fs)


def save_private_json(fs: FileSystem, path: Path, doc: dict) -> None:
    """As save_json, for secrets: the file is created with mode 0600 and never exists, even as
    its temporary copy, with wider permissions."""
    atomic_write(path, dump_json(doc), fs, mode=0o600)
