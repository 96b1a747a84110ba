"""README.md's and docs/'s commands, run the way a newcomer pastes them, so that they cannot rot.

Every ``sh`` and ``python`` block of README.md and of docs/*.md carries a mark on the line before it:
``<!-- readme-test: run -->`` or ``<!-- readme-test: skip (why) -->`` (``make run`` itself,
Docker, Spark, installs). The marked-run blocks run in the order of ``DOCUMENTS`` and, within a
document, top to bottom, each in a fresh ``bash -e -o pipefail`` (or Python), against one real
broker process, from a directory whose ``data/`` is the broker's log dir and whose
``.venv/bin/triolog`` is this checkout's CLI. ``127.0.0.1:9092`` and ``127.0.0.1:9404`` (the
addresses ``make run`` serves) become the test broker's free ports; the CLI's default
``--bootstrap-server`` is pointed there too, as for a user of ``make run``. The counts of both marks
are pinned per document, so a block cannot silently stop running. Links must resolve inside the
repository, to a file that exists and, for an ``#anchor``, to a heading it has: a clone is all a
reader has.
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
#: The documents whose blocks run, in the order they run (a later block reads what an earlier one
#: wrote: the groups CLI the Python client's group, dump-log the tour's topic), each with its
#: pinned numbers of (run, skipped) blocks. A document of docs/ with code blocks must be listed.
DOCUMENTS: dict[str, tuple[int, int]] = {
    # The tour; make run/test.
    "README.md": (1, 1),
    # The Python client snippet, the consumer group snippet, the CLI block, the CLI reference
    # block, the groups CLI block.
    "docs/clients.md": (6, 0),
    # The Kafka clients' snippet and commands.
    "docs/kafka-clients.md": (2, 0),
    # triolog configs under "Quotas"; the users fragment, the SASL_SSL producer, users and ACLs.
    "docs/security.md": (1, 3),
    # dump-log under "Inspecting segments".
    "docs/storage.md": (1, 0),
    # pip install, the Spark fragment, the exactly-once fragment, the Spark job and its command,
    # the example pipeline.
    "docs/spark.md": (0, 6),
    # docker, docker compose, the secure profile.
    "docs/operations.md": (0, 3),
    # make bench.
    "docs/benchmarks.md": (0, 1),
    # The plugin's example, run by tests/test_testing_plugin.py in a pytest of its own.
    "docs/testing.md": (0, 1),
}
CODE_LANGUAGES = {"sh", "bash", "shell", "console", "python", "py", "pycon"}

_FENCE = re.compile(r"^```([\w-]*)\s*$")
_MARK = re.compile(r"^<!-- readme-test: (run|skip)(?: \(([^)]+)\))? -->$")


def markdown_files() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


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


def _code_blocks(path: Path) -> list[Block]:
    return [b for b in readme_blocks(path.read_text(encoding="utf-8")) if b.language in CODE_LANGUAGES]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_code_block_is_marked_and_none_drops_out(path):
    name = str(path.relative_to(ROOT))
    blocks = _code_blocks(path)
    unmarked = [b.line for b in blocks if b.mark is None]
    assert not unmarked, f"{name} code blocks without a readme-test mark, at lines {unmarked}"
    skipped = [b for b in blocks if b.mark == "skip"]
    assert all(b.reason for b in skipped), "a skipped block must say why: <!-- readme-test: skip (why) -->"
    if name not in DOCUMENTS:
        assert not blocks, f"{name} has code blocks: add it to DOCUMENTS in {Path(__file__).name} with their counts"
        return
    runs, skips = DOCUMENTS[name]
    assert len(skipped) == skips, [(b.line, b.reason) for b in skipped]
    assert len([b for b in blocks if b.mark == "run"]) == runs


def test_every_listed_document_exists():
    assert [name for name in DOCUMENTS if not (ROOT / name).is_file()] == []


def test_the_parser_sees_marks_and_fences():
    text = "x\n<!-- readme-test: skip (no engine) -->\n```sh\ndocker ps\n```\n\n```python\nprint(1)\n```\n"
    first, second = readme_blocks(text)
    assert (first.line, first.language, first.code, first.mark, first.reason) == (3, "sh", "docker ps\n", "skip",
                                                                                 "no engine")
    assert (second.language, second.code, second.mark) == ("python", "print(1)\n", None)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (whose `#` and `](` are no markup)."""
    text = re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown text (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S), re.M):
        anchor = _anchor(heading)
        if anchor in seen:
            seen[anchor] += 1
            anchor = f"{anchor}-{seen[anchor]}"
        else:
            seen[anchor] = 0
        found.add(anchor)
    return found


def links(text: str) -> list[str]:
    """The targets of a markdown text's inline links and images and of its reference definitions."""
    prose = _prose(text)
    return re.findall(r"\]\(([^)\s]+)[^)]*\)", prose) + re.findall(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", prose, re.M)


def broken_links(path: Path, root: Path) -> list[str]:
    """Every relative link of ``path`` that leaves ``root``, names no file, or names no heading."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https://, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            broken.append(f"{target} (no heading #{anchor} in {resolved.relative_to(root.resolve())})")
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(path):
    """A clone has everything the README and docs/ point at: files for paths, headings for #anchors."""
    assert broken_links(path, ROOT) == [], f"{path.relative_to(ROOT)} links"
    # A clone has nothing above its root and no one's home directory.
    assert not re.search(r"(/home/|/Users/|\.\./shared)", path.read_text(encoding="utf-8")), "a path outside the repository"


def test_the_readme_links_every_page_of_docs():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in links(README.read_text())}
    pages = set((ROOT / "docs").glob("*.md"))
    assert pages and sorted(p.name for p in pages if p.resolve() not in linked) == []
    assert not re.search(r"\.\./", README.read_text()), "README.md is read from the repository root"


def test_the_link_checker_finds_missing_files_and_headings(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Same\n\n## Same\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text("# Top\n\n[ok](docs/a.md#a-page) [dup](docs/a.md#same-1) [self](#top) [web](https://x.org/#y)\n"
                    "[gone](docs/b.md) [no](docs/a.md#not-a-heading) [up](../outside.md) [here](#nowhere)\n"
                    "`[code](docs/c.md)`\n\n[ref]: docs/d.md\n")
    assert broken_links(page, tmp_path) == [
        "docs/b.md (no such file in the repository)", "docs/a.md#not-a-heading (no heading #not-a-heading in docs/a.md)",
        "../outside.md (no such file in the repository)", "#nowhere (no heading #nowhere in README.md)",
        "docs/d.md (no such file in the repository)"]


def test_the_readme_keeps_the_two_commands_ci_runs():
    """A newcomer's first section: make run and make test, the command .ci/run runs."""
    text = README.read_text()
    section = text[text.index("\n## The two commands\n"):text.index("\n## ", text.index("\n## The two commands\n") + 1)]
    block = next(b for b in readme_blocks(section) if b.language == "sh")
    assert [line.split("#")[0].strip() for line in block.code.splitlines()] == ["make run", "make test"]
    assert "Both need `python3` (3.11 or newer" in section and "and `make`" in section
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M), ci


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
    for name in DOCUMENTS:
        for block in [b for b in readme_blocks((ROOT / name).read_text(encoding="utf-8")) if b.mark == "run"]:
            code = _substitute(block.code, broker)
            if block.language in ("python", "py"):
                command = [sys.executable, "-c", code]
            else:
                # -x: stderr names each command as it starts, so a block that hangs says where
                command = ["bash", "-e", "-x", "-o", "pipefail", "-c", code]
            where = f"{name} block at line {block.line}"
            try:
                done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=90)
            except subprocess.TimeoutExpired as hung:
                pytest.fail(f"{where} still running after 90 s:\n{hung.stdout}\n{hung.stderr}\n"
                            f"the broker's log, its end:\n{broker.log_text()[-4000:]}")
            assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr}"
            outputs.append(done.stdout)
    (tour, client_snippet, group_snippet, txn_snippet, cli, cli_reference, groups_cli, kafka_snippet, kafka_cli,
     quotas, dump) = outputs

    # What the README and docs/ say each block shows.
    assert "Offset:40\tuser-1\tclick 41\n" in tour  # the first record at/after $SINCE
    assert len(list((home / "data" / "tour-0").glob("*.log"))) > 1  # tiny segments rolled
    assert re.search(r'^triolog_log_rolls_total\{.*topic="tour".*\} [1-9]', tour, re.M)
    removed = re.search(r"^triolog_cleaner_records_removed_total ([0-9.]+)$", tour, re.M)
    assert removed and float(removed.group(1)) > 0, tour  # compaction ran and dropped old values
    assert re.search(r"^\d+ 0 user-7 \{'amount': 42, 'currency': 'EUR'\}$", client_snippet, re.M), client_snippet
    assert re.search(r"^1 record\(s\) from payments-\d$", client_snippet, re.M), client_snippet
    assert "processed 1 record(s) as group billing\n" in group_snippet, group_snippet
    assert re.search(r"^[1-9]\d* receipt\(s\) committed with the offsets of group billing-eos$", txn_snippet, re.M), txn_snippet
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
