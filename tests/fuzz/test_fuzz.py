"""The fuzz targets in CI: the seed corpus replayed in-process, and each target under atheris for a
bounded number of inputs (a subprocess: libFuzzer owns the process). bench/fuzz.py runs 1M each.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from . import make_corpus
from .targets import TARGETS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"



def _corpus_params(target: str):
    for path in sorted((CORPUS / target).iterdir()):
        yield pytest.param(path, id=path.name)


def test_seed_corpus_is_what_make_corpus_writes():
    """The corpus in the repository is reproducible from make_corpus.py: the same files, byte for
    byte except where a compression library's output may differ between its versions."""
    expected = {"requests": make_corpus.requests_seeds(), "validator": make_corpus.validator_seeds(),
                "kafka_requests": make_corpus.kafka_requests_seeds()}
    codecs = ("gzip", "snappy", "lz4", "zstd")
    for target, seeds in expected.items():
        stored = {p.name: p.read_bytes() for p in (CORPUS / target).iterdir()}
        hint = f"run python -m tests.fuzz.make_corpus to refresh corpus/{target}"
        assert sorted(stored) == sorted(seeds), hint
        for name, data in seeds.items():
            assert stored[name] == data or any(codec in name for codec in codecs), f"{name}: {hint}"
    assert (HERE / "requests.dict").read_text() == make_corpus.request_dictionary()
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert total < 300_000  # small enough to keep in the repository


@pytest.mark.parametrize("path", list(_corpus_params("requests")))
def test_requests_seed(path):
    TARGETS["requests"](path.read_bytes())


@pytest.mark.parametrize("path", list(_corpus_params("validator")))
def test_validator_seed(path):
    TARGETS["validator"](path.read_bytes())


@pytest.mark.parametrize("path", list(_corpus_params("kafka_requests")))
def test_kafka_requests_seed(path):
    TARGETS["kafka_requests"](path.read_bytes())


#: The memory a fuzz run may use (libFuzzer's -rss_limit_mb), over the peak of the process that
#: starts it: Linux carries a process's peak RSS (ru_maxrss, which libFuzzer checks) across fork
#: and exec, so a pytest worker that once held 2.6 GB started every fuzzer "at" 2.6 GB, over a
#: plain 2048 limit before its first input.
FUZZ_RSS_MB = 2048


def _rss_limit_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + FUZZ_RSS_MB


def run_atheris(target: str, runs: int, scratch: Path, *, seed: int = 1,
                env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m tests.fuzz.run TARGET`` with the repository's seeds; new inputs go to scratch.
    A number of inputs, not a time: on a loaded machine the run takes longer instead of stopping
    short (pytest-timeout still fails one that hangs)."""
    scratch.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "tests.fuzz.run", target, f"-runs={runs}", f"-seed={seed}",
            "-max_len=16384", "-timeout=20", f"-rss_limit_mb={_rss_limit_mb()}",
            "-print_final_stats=1", f"-artifact_prefix={scratch}/", str(scratch), str(CORPUS / target)]
    if target == "requests":
        args.insert(4, f"-dict={HERE / 'requests.dict'}")
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def executed_units(output: str) -> int:
    found = re.search(r"stat::number_of_executed_units:\s*(\d+)", output)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize("target", [
    "requests",
    "validator",
    "kafka_requests",
])
def test_target_under_atheris(target, tmp_path):
    # 10,000 inputs: about 12 s for the slowest target (requests) on an idle two-core machine, and
    # under a minute at the 195 inputs/s a loaded one gave it; bench/fuzz.py runs a million
    runs = 10_000
    result = run_atheris(target, runs, tmp_path / "scratch")
    crashes = sorted(p.name for p in (tmp_path / "scratch").glob("crash-*"))
    assert result.returncode == 0, f"{crashes}\n{result.stderr[-6000:]}"
    assert executed_units(result.stderr) >= runs, result.stderr[-3000:]
