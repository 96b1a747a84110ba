"""README.md's commands, run the way a newcomer pastes them, so that the README cannot rot.

Every ``sh`` and ``python`` block of the README carries a mark on the line before it:
``<!-- readme-test: run -->`` or ``<!-- readme-test: skip (why) -->`` (``make run`` itself,
Docker, Spark, installs). The marked-run blocks run in README order, each in a fresh ``bash -e -o
pipefail`` (or Python), against one real broker process, from a directory whose ``data/`` is the
broker's log dir and whose ``.venv/bin/triolog`` is this checkout's CLI. ``127.0.0.1:9092`` and
``127.0.0.1:9404`` (the addresses ``make run`` serves) become the test broker's free ports; the
CLI's default ``--bootstrap-server`` is pointed there too, as for a user of ``make run``. The
counts of both marks are pinned, so a block cannot silently stop running. Links must resolve
inside the repository: a clone is all a reader has.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.broker_process import ROOT, BrokerProcess

README = ROOT / "README.md"
#: The tour, the Python client snippet, the consumer group snippet, the CLI block, the groups
#: CLI block, the Kafka clients' snippet and commands, triolog configs under "Quotas", dump-log
#: under "Inspecting segments".
RUN_BLOCKS = 10
#: make run/test, pip install, the Spark fragment, the Spark job and its command, the Spark
#: example pipeline, docker, docker compose, make bench.
SKIPPED_BLOCKS = 13
CODE_LANGUAGES = {"sh", "bash", "shell", "console", "python", "py", "pycon"}

_FENCE = re.compile(r"^```([\w-]*)\s*$")
_MARK = re.compile(r"^<!-- readme-test: (run|skip)(?: \(([^)]+)\))? -->$")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    mark: str | None
    reason: str | None


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(previous.strip())
        blocks.append(Block(i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                            mark.group(1) if mark else None, mark.group(2) if mark else None))
        i = end + 1
    return blocks


def test_every_code_block_is_marked_and_none_drops_out():
    blocks = [b for b in readme_blocks(README.read_text()) if b.language in CODE_LANGUAGES]
    unmarked = [b.line for b in blocks if b.mark is None]
    assert not unmarked, f"README.md code blocks without a readme-test mark, at lines {unmarked}"
    skipped = [b for b in blocks if b.mark == "skip"]
    assert all(b.reason for b in skipped), "a skipped block must say why: <!-- readme-test: skip (why) -->"
    assert len(skipped) == SKIPPED_BLOCKS, [(b.line, b.reason) for b in skipped]
    assert len([b for b in blocks if b.mark == "run"]) == RUN_BLOCKS


def test_the_parser_sees_marks_and_fences():
    text = "x\n<!-- readme-test: skip (no engine) -->\n```sh\ndocker ps\n```\n\n```python\nprint(1)\n```\n"
    first, second = readme_blocks(text)
    assert (first.line, first.language, first.code, first.mark, first.reason) == (3, "sh", "docker ps\n", "skip",
                                                                                 "no engine")
    assert (second.language, second.code, second.mark) == ("python", "print(1)\n", None)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_resolve_inside_the_repository():
    """A clone has everything the README points at: headings for #anchors, files for paths."""
    text = README.read_text()
    prose = re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)
    anchors = {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    assert links, "the README links its own sections"
    for target in links:
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        if path:
            resolved = (ROOT / path).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), f"README.md links {target}"
        else:
            assert anchor in anchors, f"README.md links #{anchor}, which is no heading"
    # A clone has nothing above its root and no one's home directory.
    assert not re.search(r"(/home/|/Users/|\.\./)", text), "a path outside the repository"


_CLI_SHIM = """#!{python}
# The checkout's triolog command; its --bootstrap-server defaults to $TRIOLOG_BOOTSTRAP_SERVER,
# which the fixture points at the test broker.
import sys

sys.path.insert(0, {root!r})
from triolog.broker.cli import main

sys.exit(main())
"""


@pytest.fixture
def newcomer(tmp_path):
    """A working directory as after ``make run``: data/ is the broker's, .venv/bin/triolog the CLI."""
    home = tmp_path
    broker = BrokerProcess(home / "data", ("log.cleaner.backoff.ms=200",), metrics=True, kafka=True).start()
    bootstrap = f"127.0.0.1:{broker.port}"
    bin_dir = home / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "triolog"
    shim.write_text(_CLI_SHIM.format(python=sys.executable, root=str(ROOT)))
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT), "TRIOLOG_BOOTSTRAP_SERVER": bootstrap}
    try:
        yield home, broker, env
    finally:
        broker.kill()


def _substitute(code: str, broker: BrokerProcess) -> str:
    return (code.replace("127.0.0.1:9092", f"127.0.0.1:{broker.port}")
                .replace("127.0.0.1:19092", f"127.0.0.1:{broker.kafka_port}")
                .replace("127.0.0.1:9404", f"127.0.0.1:{broker.metrics_port}"))


def test_the_readme_blocks_run(newcomer):
    home, broker, env = newcomer
    outputs = []
    for block in [b for b in readme_blocks(README.read_text()) if b.mark == "run"]:
        code = _substitute(block.code, broker)
        if block.language in ("python", "py"):
            command = [sys.executable, "-c", code]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=90)
        where = f"README.md block at line {block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr}"
        outputs.append(done.stdout)
    (tour, client_snippet, group_snippet, cli, cli_reference, groups_cli, kafka_snippet, kafka_cli, quotas,
     dump) = outputs

    # What the README says each block shows.
    assert "Offset:40\tuser-1\tclick 41\n" in tour  # the first record at/after $SINCE
    assert len(list((home / "data" / "tour-0").glob("*.log"))) > 1  # tiny segments rolled
    assert re.search(r'^triolog_log_rolls_total\{.*topic="tour".*\} [1-9]', tour, re.M)
    removed = re.search(r"^triolog_cleaner_records_removed_total ([0-9.]+)$", tour, re.M)
    assert removed and float(removed.group(1)) > 0, tour  # compaction ran and dropped old values
    assert re.search(r"^\d+ 0 user-7 \{'amount': 42, 'currency': 'EUR'\}$", client_snippet, re.M), client_snippet
    assert re.search(r"^1 record\(s\) from payments-\d$", client_snippet, re.M), client_snippet
    assert "processed 1 record(s) as group billing\n" in group_snippet, group_snippet
    # librdkafka wrote it through the Kafka listener; triolog's CLI and kcat read the same record.
    assert kafka_snippet == "0 user-1 hello from librdkafka\n", kafka_snippet
    assert kafka_cli == "hello from librdkafka\nuser-1: hello from librdkafka at offset 0\n", kafka_cli
    assert "42 EUR\n" in cli and "17 EUR\n" in cli
    # --list, --describe (the group's committed offset: the one record read, lag 0), the dry run
    # and the executed reset to offset 0, the deletion.
    assert "billing\n" in groups_cli
    assert re.search(r"^billing +payments +\d +1 +1 +0 ", groups_cli, re.M), groups_cli
    assert re.search(r"^billing +payments +\d +0 *$", groups_cli, re.M), groups_cli
    assert "Deletion of requested consumer groups ('billing') was successful." in groups_cli, groups_cli
    consumed = [json.loads(line) for line in cli_reference.splitlines() if line.startswith('{"topic"')]
    assert sorted(record["value"] for record in consumed) == ["17 EUR", "42 EUR"], cli_reference
    headers = sorted((h["key"], h["value"]) for record in consumed for h in record["headers"])
    assert headers == [("source", "shell"), ("source", "web")], consumed
    # The describe lines the Quotas block shows as comments, each after its command.
    assert quotas.splitlines() == [
        "Completed updating config for user alice.", "Completed updating default config for clients in the cluster.",
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0",
        "Quota configs for the default client-id are producer_byte_rate=5242880.0",
        "Completed updating default config for clients in the cluster."], quotas
    assert "baseOffset: 0 " in dump
    _check_the_dump_log_mismatch_explained(home, env)


def _check_the_dump_log_mismatch_explained(home: Path, env: dict) -> None:
    """After the tour, the compacted topic's active segment has no index entry yet (under
    index.interval.bytes), so dump-log reads the preallocated zero slot as (base offset, 0)."""
    active = sorted((home / "data" / "profiles-0").glob("*.log"))[-1]
    base = int(active.stem)
    triolog = [str(home / ".venv" / "bin" / "triolog"), "dump-log", "--files"]
    index = str(active.with_suffix(".index"))
    done = subprocess.run([*triolog, index], cwd=home, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert f"offset: {base} position: 0\n" in done.stdout
    assert f"Mismatches in :{index}\n  Index offset: {base}, log offset: " in done.stderr, done.stderr
    done = subprocess.run([*triolog, index, "--index-sanity-check"], cwd=home, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "passed sanity check" in done.stdout, done
