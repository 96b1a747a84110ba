"""Run one fuzz target under atheris (libFuzzer): ``python -m tests.fuzz.run TARGET [libFuzzer args]``.

    python -m tests.fuzz.run requests -runs=100000 /tmp/new-inputs tests/fuzz/corpus/requests
    python -m tests.fuzz.run validator -max_total_time=60 /tmp/new-inputs tests/fuzz/corpus/validator
    python -m tests.fuzz.run validator crash-1234abcd      # replay one input

libFuzzer writes new interesting inputs into the first corpus directory: give a scratch one
first and the repository's seed corpus after it. By default the first unexpected exception stops
the run (libFuzzer saves the input as ``crash-*``). With ``TRIOLOG_FUZZ_COLLECT=DIR`` the run
goes on instead: each unexpected exception is appended to ``DIR/findings.log`` (one line each)
and the first input of each kind saved as ``DIR/<hash of kind>.input`` with its traceback beside it
(``bench/fuzz.py`` counts them that way).
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["triolog"]):
    from tests.fuzz.targets import TARGETS


def _kind(exc: BaseException) -> str:
    """A short stable name for an exception: type and the innermost frame of our code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/site-packages/" not in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    text = f"{type(exc).__name__}@{where}"
    if getattr(exc, "kind", ""):
        text = f"{type(exc).__name__}[{exc.kind}]"
    return text


def collecting(target, directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    log = open(directory / "findings.log", "a", buffering=1)

    def run(data: bytes) -> None:
        try:
            target(data)
        except Exception as exc:
            kind = _kind(exc)
            log.write(f"{kind}\t{type(exc).__name__}: {str(exc)[:200]!r}\n")
            if kind not in seen:
                seen.add(kind)
                name = hashlib.sha1(kind.encode()).hexdigest()[:12]
                (directory / f"{name}.input").write_bytes(data)
                (directory / f"{name}.txt").write_text(kind + "\n\n" + "".join(traceback.format_exception(exc)))

    return run


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m tests.fuzz.run {{{','.join(TARGETS)}}} [libFuzzer args]")
    target = TARGETS[sys.argv[1]]
    collect = os.environ.get("TRIOLOG_FUZZ_COLLECT")
    if collect:
        target = collecting(target, Path(collect))
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
