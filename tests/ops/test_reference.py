"""The generated references of docs/ (config/reference.py) are complete and up to date.

``test_docs_references_are_up_to_date`` fails until each document of ``DOCUMENTS``
(docs/configuration.md, docs/metrics.md, docs/kafka-clients.md) holds its markers
(``<!-- config-reference:begin/end -->``...) and ``python -m triolog.config.reference --write`` has
been run.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from triolog.config.broker_config import BROKER_CONFIGS
from triolog.config.loader import env_var_name
from triolog.config.log_config import TOPIC_CONFIGS
from triolog.config.reference import DOCUMENTS, MARKERS, METRICS_SOURCE, check, config_reference, metrics_reference
from tests.ops.dockerfile import ROOT


def _reference(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triolog.config.reference", *args], capture_output=True, text=True,
                          cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_docs_references_are_up_to_date(document):
    problems = check(ROOT / document)
    assert problems == [], "\n".join(problems)


def test_every_reference_has_one_document():
    placed = [name for names in DOCUMENTS.values() for name in names]
    assert sorted(placed) == sorted(MARKERS)


def test_check_without_a_file_checks_the_documents_of_the_checkout():
    result = _reference("--check", cwd="/")
    assert result.returncode == 0, result.stderr


def test_config_reference_lists_every_key_with_its_env_var_and_topic_key():
    text = config_reference()
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == set(BROKER_CONFIGS)
    for name, key in BROKER_CONFIGS.items():
        assert f"`{env_var_name(name)}`" in rows[name]
        if key.topic_name:
            assert f"`{key.topic_name}`" in rows[name]
    assert {key.topic_name for key in BROKER_CONFIGS.values() if key.topic_name} == set(TOPIC_CONFIGS)
    assert "`TRIOLOG_LOG_RETENTION_MS`" in rows["log.retention.ms"]


def test_metrics_reference_documents_every_metric_the_broker_registers():
    """Every metric name in broker/metrics.py's code is in its docstring's tables, so in docs/metrics.md."""
    source = METRICS_SOURCE.read_text()
    code = source[source.index('"""', 3) + 3:]  # after the module docstring
    registered = set(re.findall(r'"(triolog_[a-z_]+)"', code))
    documented = set(re.findall(r"^\| `(triolog_[a-z_]+)`", metrics_reference(), re.M))
    assert registered, "no metric names found in broker/metrics.py"
    # Counter families are registered without their _total suffix.
    missing = sorted(name for name in registered if name not in documented and f"{name}_total" not in documented)
    assert missing == [], f"add these to the tables of broker/metrics.py's docstring: {missing}"


def test_write_then_check_round_trip(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- config-reference:begin -->\nold\n<!-- config-reference:end -->\n\ntext\n\n"
                      "<!-- metrics-reference:begin -->\n<!-- metrics-reference:end -->\n"
                      "<!-- kafka-apis:begin -->\n<!-- kafka-apis:end -->\n")
    stale = _reference("--check", str(readme))
    assert stale.returncode == 1 and "out of date" in stale.stderr
    assert _reference("--write", str(readme)).returncode == 0
    assert _reference("--check", str(readme)).returncode == 0
    written = readme.read_text()
    assert "`log.retention.ms`" in written and "`triolog_log_size_bytes`" in written and "\ntext\n" in written
    assert "| Produce | 0 | 3–11 | `produce` |" in written  # the Kafka listener's table
    assert _reference("--write", str(readme)).returncode == 0 and readme.read_text() == written  # stable


def test_check_reports_missing_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    result = _reference("--check", str(readme))
    assert result.returncode == 1
    assert "config-reference:begin" in result.stderr and "metrics-reference:begin" in result.stderr
