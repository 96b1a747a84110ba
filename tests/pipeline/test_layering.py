"""pipeline/ is a client of the broker like any other: it may use client/ and protocol/, never the
broker's own packages; and ``import pipeline`` stays cheap (PySpark loads only when used).

The import rules for triolog.pipeline are an import-linter contract (pyproject.toml, checked by
tests/test_architecture.py); import-linter takes packages only, so the top-level module PySpark
finds, pyspark_triolog, is checked here.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.e2e.broker_process import ROOT


def test_pyspark_module_imports_the_pipeline_but_never_the_broker():
    path = ROOT / "pyspark_triolog.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "a top-level module has no package to import relatively from"
            names.append(node.module)
    assert "triolog.pipeline.source" in names
    assert [name for name in names if name.startswith(("triolog.broker", "triolog.config", "tests"))] == []


def test_importing_pipeline_does_not_load_pyspark():
    code = (
        "import sys, triolog.pipeline, triolog.pipeline.options, triolog.pipeline.plan; print('pyspark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
