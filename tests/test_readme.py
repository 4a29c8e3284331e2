"""The README's usage example runs as written (with its store directory moved to a temporary one)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_store_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(b for b in blocks if "MessageStore(" in b)
    assert 'Path("/tmp/store")' in example
    code = example.replace('Path("/tmp/store")', f"Path({str(tmp_path / 'store')!r})")
    scope: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), scope)
    store = scope["store"]
    assert getattr(store, "shutdown_normally", None) is True
    assert getattr(scope["r"], "is_ok", False)
