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


def test_readme_client_example_runs(tmp_path: Path) -> None:
    import time

    from harness.launcher import Topology

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(b for b in blocks if "PushConsumer(" in b)
    assert example.count('"127.0.0.1:9876"') == 2
    with Topology(tmp_path / "topo") as topo:
        code = example.replace('"127.0.0.1:9876"', repr(topo.namesrv_addr))
        scope: dict[str, object] = {}
        exec(compile(code, str(README), "exec"), scope)
        consumer, producer = scope["consumer"], scope["producer"]
        try:
            deadline = time.monotonic() + 30
            while not scope["received"] and time.monotonic() < deadline:
                time.sleep(0.05)
            received = scope["received"]
            assert isinstance(received, list) and [m.body for m in received] == [b"hello"]
        finally:
            consumer.shutdown()  # type: ignore[attr-defined]
            producer.shutdown()  # type: ignore[attr-defined]


def test_readme_transaction_example_runs(tmp_path: Path, capsys: object) -> None:
    from harness.launcher import Topology

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(b for b in blocks if "TransactionProducer(" in b)
    with Topology(tmp_path / "topo") as topo:
        scope: dict[str, object] = {}
        exec(compile(example.replace('"127.0.0.1:9876"', repr(topo.namesrv_addr)), str(README), "exec"), scope)
    assert "COMMIT_MESSAGE" in capsys.readouterr().out  # type: ignore[attr-defined]
