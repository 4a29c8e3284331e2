import json
import logging

from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager


def test_persist_writes_file_and_keeps_previous_as_bak(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "g", "t", 0, 1)
    m.persist()
    path = tmp_path / "config" / "consumerOffset.json"
    assert path.exists() and not (path.parent / "consumerOffset.json.bak").exists()
    first = path.read_text()
    m.commit_offset("h", "g", "t", 0, 2)
    m.persist()
    assert (path.parent / "consumerOffset.json.bak").read_text() == first
    assert not (path.parent / "consumerOffset.json.tmp").exists()
    assert json.loads(path.read_text())["offsetTable"]["t@g"] == {"0": 2}


def test_missing_files_is_a_fresh_start(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() is True and m.offset_table == {} and m.last_error is None


def _two_versions(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "g", "t", 0, 5)
    m.persist()
    m.commit_offset("h", "g", "t", 0, 9)
    m.persist()
    return tmp_path / "config" / "consumerOffset.json"


def test_truncated_main_falls_back_to_bak(tmp_path, caplog):
    path = _two_versions(tmp_path)
    path.write_text(path.read_text()[:15])
    m = ConsumerOffsetManager(tmp_path)
    with caplog.at_level(logging.ERROR):
        assert m.load() is True
    assert m.query_offset("g", "t", 0) == 5
    assert str(path) in caplog.text and m.last_error is not None and str(path) in m.last_error


def test_garbage_and_empty_main_fall_back_to_bak(tmp_path):
    path = _two_versions(tmp_path)
    path.write_bytes(b"\x00\xffgarbage")
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.query_offset("g", "t", 0) == 5
    path.write_text("")
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.query_offset("g", "t", 0) == 5


def test_wrong_shape_falls_back_to_bak(tmp_path):
    path = _two_versions(tmp_path)
    path.write_text('{"offsetTable": {"t@g": {"0": "x"}}}')
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.query_offset("g", "t", 0) == 5


def test_both_corrupt_returns_false_with_reason(tmp_path):
    path = _two_versions(tmp_path)
    path.write_text("{not json")
    (path.parent / "consumerOffset.json.bak").write_text("[1,")
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() is False
    assert m.last_error is not None
    assert "consumerOffset.json:" in m.last_error and "consumerOffset.json.bak" in m.last_error
