"""pipeline/ is a client of the broker like any other: it may use client/ and protocol/, never the
broker's own packages; and ``import pipeline`` stays cheap (PySpark loads only when used)."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.e2e.broker_process import ROOT


def test_pipeline_imports_client_and_protocol_but_never_the_broker():
    violations = []
    for path in sorted([*(ROOT / "pipeline").rglob("*.py"), ROOT / "pyspark_triolog.py"]):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            violations += [f"{path.relative_to(ROOT)} imports {n}" for n in names
                           if n.startswith(("triolog.broker", "triolog.config", "tests"))]
    assert violations == []


def test_importing_pipeline_does_not_load_pyspark():
    code = ("import sys, triolog.pipeline, triolog.pipeline.options, triolog.pipeline.plan; "
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
