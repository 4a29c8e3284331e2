"""spark_reports reads run records only: it imports neither the broker nor the load generator, and of the harness
only the contracts both halves share: the run-record schema (``harness.records.schema``), the findings file
(``harness.records.findings``), the machine-noise samples (``harness.records.noise``) and the scaling
experiment's rows (``harness.records.scaling``)."""

import ast
import subprocess
import sys
from pathlib import Path

import spark_reports

FORBIDDEN = ("reference_broker", "locust", "gevent", "harness")
ALLOWED = ("harness.records.schema", "harness.records.findings", "harness.records.noise",
           "harness.records.scaling")


def test_no_module_imports_the_broker_the_load_generator_or_the_harness_beyond_the_schema():
    root = Path(spark_reports.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN and n not in ALLOWED]
    assert offenders == []


def test_the_reports_load_no_broker_and_no_load_generator():
    code = ("import sys, spark_reports.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'reference_broker', 'locust', 'gevent'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(spark_reports.__file__).parents[1])
    assert done.stdout.strip() == "[]"

def _imports(path: Path) -> set[str]:
    """The spark_reports modules ``path`` imports anywhere (``__main__`` blocks included), except under
    ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in out if n.split(".")[0] == "spark_reports"}


def test_no_import_cycle_and_the_jobs_never_import_the_command_line():
    root = Path(spark_reports.__file__).parent
    modules = {".".join(("spark_reports", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in root.rglob("*.py")}
    graph = {m: {n for n in _imports(p) if n in modules and n != m} for m, p in modules.items()}
    assert not [m for m in graph if m.startswith("spark_reports.jobs.") and "spark_reports.cli" in graph[m]]
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, " -> ".join((*path, m))
        if m in done:
            return
        for n in graph[m]:
            visit(n, (*path, m))
        done.add(m)

    for m in sorted(graph):
        visit(m, ())
