"""spark_reports reads run records only: it imports neither the broker nor the load generator."""

import ast
from pathlib import Path

import spark_reports

FORBIDDEN = ("reference_broker", "locust", "gevent", "harness")


def test_no_module_imports_the_broker_the_load_generator_or_the_harness():
    root = Path(spark_reports.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
