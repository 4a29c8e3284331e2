"""harness/compare_faults.py: which chaos cells ``python -m harness compare --faults`` asks for, and how it reads
their rows (the cells themselves run end to end in tests/peers/test_compare.py)."""

from __future__ import annotations

from pathlib import Path

from harness.compare_faults import matrix_args, parse_rows, row_words, run_fault_cells


def test_each_label_is_one_matrix_call() -> None:
    runs = Path("/r")
    assert matrix_args("reference-sync", ["kill9", "power_loss_torn"], 2, runs, 7) == [
        "matrix", "--driver", "rocketmq", "--broker-impl", "reference", "--flush", "sync", "--faults",
        "kill9,power_loss_torn", "--cycles", "2", "--profiles", "none", "--runs-dir", "/r", "--json", "--seed", "7"]
    rmq = matrix_args("rocketmq-async", ["pause"], 1, runs, None)
    assert rmq is not None and rmq[1:7] == ["--driver", "rocketmq", "--broker-impl", "rocketmq", "--flush", "async"]
    # A peer has no torn power loss (chaos/peer_faults.py): that fault is left out of its call, or the call.
    nats = matrix_args("nats", ["kill9", "power_loss_torn"], 1, runs, None)
    assert nats is not None and nats[1:5] == ["--driver", "nats", "--faults", "kill9"]
    assert matrix_args("nats", ["power_loss_torn"], 1, runs, None) is None


def test_rows_of_every_array_printed() -> None:
    out = '[\n {"fault": "kill9", "verdict": "ok"}\n]\n[{"fault": "pause", "ok": false, "violations": ["v"]}]\n'
    rows = parse_rows(out)
    assert [r["fault"] for r in rows] == ["kill9", "pause"]
    assert parse_rows("") == []
    assert row_words("nats", {**rows[0], "acknowledged": 5, "lost": 0}).endswith("0 lost, promise kept")
    assert row_words("x", rows[1]).endswith("promise NOT kept: v")
    assert row_words("x", {"fault": "power_loss", "skipped": "not root"}) == "x power_loss: skipped (not root)"


def test_a_peer_with_none_of_the_faults_is_a_skipped_row(tmp_path: Path) -> None:
    rows = run_fault_cells(["rabbitmq-quorum"], ["power_loss_torn"], 1, tmp_path)
    assert rows == [{"label": "rabbitmq-quorum", "skipped": "none of power_loss_torn is built for rabbitmq-quorum"}]
    assert list(tmp_path.iterdir()) == []
