"""A copy of this checkout's tracked files, as a fresh clone has them (no built extensions, no .venv)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_copy(target: Path) -> Path:
    """Copy the files git tracks here (symlinks as symlinks) to ``target``; returns ``target``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    for relative in listed.stdout.decode().split("\0"):
        if not relative or not os.path.lexists(ROOT / relative):
            continue  # deleted in the work tree, not yet committed
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, destination, follow_symlinks=False)
    return target


def c_compiler_works() -> bool:
    """Whether the C compiler a build here would use (``$CC``, else the interpreter's) compiles a
    file: ``CC=false`` (how the README shows an install without one) says no, as does none at all."""
    import sysconfig
    import tempfile

    command = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(command[0]) is None:
        return False
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch, "probe.c")
        source.write_text("int triolog_probe(void) { return 0; }\n")
        done = subprocess.run([*command, "-c", str(source), "-o", str(Path(scratch, "probe.o"))],
                              capture_output=True, timeout=60)
        return done.returncode == 0


#: Imports the core as the broker does, walks a two-record batch (bytes made here, so the walk needs
#: nothing else of the package), prints what runs.
PROBE = """
import logging
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
from triolog import core
walk = core.load("protocol.record_codec").walk_records
records = bytes.fromhex("{records}")
print(core.COMPILED, "|", core.status(), "|", walk(records, 0, 2, 7), "|", walk.__module__)
import triolog.core as c, os
print(os.path.dirname(c.__file__))
"""


def core_probe() -> tuple[str, tuple]:
    """PROBE for a real two-record batch's records (after its 61-byte header), and what the
    pure-Python walk of them returns: whichever core runs must return the same."""
    from triolog import core
    from triolog.protocol.records import Record, encode_batch

    batch = encode_batch([Record(0, 7, b"k", b"v"), Record(1, 9, None, b"w")])
    records = batch[61:]
    return PROBE.replace("{records}", records.hex()), core.implementation("protocol.record_codec", False).walk_records(
        records, 0, 2, 7)
