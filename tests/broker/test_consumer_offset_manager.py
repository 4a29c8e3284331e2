import json

from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager


def test_commit_query_unknown():
    m = ConsumerOffsetManager("/nonexistent")
    assert m.query_offset("g", "t", 0) == -1
    m.commit_offset("1.2.3.4:5", "g", "t", 0, 12)
    m.commit_offset("1.2.3.4:5", "g", "t", 1, 3)
    assert m.query_offset("g", "t", 0) == 12 and m.query_offset("g", "t", 2) == -1
    assert m.query_offset("other", "t", 0) == -1
    m.commit_offset("h", "g", "t", 0, 5)  # going backwards is allowed (logged)
    assert m.query_offset("g", "t", 0) == 5
    assert m.query_offsets("g", "t") == {0: 5, 1: 3}


def test_which_topic_and_group():
    m = ConsumerOffsetManager("/nonexistent")
    m.commit_offset("h", "g1", "t1", 0, 1)
    m.commit_offset("h", "g1", "t2", 0, 1)
    m.commit_offset("h", "g2", "t1", 0, 1)
    assert m.which_topic_by_consumer("g1") == {"t1", "t2"}
    assert m.which_group_by_topic("t1") == {"g1", "g2"}
    m.clean_offset_by_topic("t1")
    assert m.which_group_by_topic("t1") == set()
    assert m.clean_offsets_of_absent_topics(["t9"]) == ["t2@g1"] and m.offset_table == {}


def test_persist_load_shape(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "g", "t", 0, 12)
    m.commit_offset("h", "g", "t", 3, 7)
    m.persist()
    obj = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert obj == {"offsetTable": {"t@g": {"0": 12, "3": 7}}}
    m2 = ConsumerOffsetManager(tmp_path)
    assert m2.load() and m2.query_offset("g", "t", 3) == 7


def test_loads_fastjson_unquoted_queue_ids(tmp_path):
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text('{\n\t"offsetTable":{\n\t\t"%RETRY%g@g":{0:4},\n\t\t"t@g":{0:12,1:3}\n\t}\n}')
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.query_offset("g", "t", 1) == 3 and m.query_offset("g", "%RETRY%g", 0) == 4


def test_slave_commits_survive_a_restart_in_the_file_not_on_the_wire(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.track_slave_commits = True
    m.commit_offset("h", "g", "t", 0, 12)
    m.commit_offset("h", "g", "t", 2, 4)
    m.persist()
    obj = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert obj == {"offsetTable": {"t@g": {"0": 12, "2": 4}}, "slaveCommitTable": {"t@g": {"0": 12, "2": 4}}}
    assert json.loads(m.encode()) == {"offsetTable": {"t@g": {"0": 12, "2": 4}}}  # GET_ALL_CONSUMER_OFFSET's body
    m2 = ConsumerOffsetManager(tmp_path)
    assert m2.load() and m2.slave_commits == {("t@g", 0): 12, ("t@g", 2): 4}
    # once the master has them, the file forgets them
    m2.slave_commits.clear()
    m2.persist()
    assert "slaveCommitTable" not in json.loads((tmp_path / "config" / "consumerOffset.json").read_text())


def test_a_malformed_slave_commit_table_falls_back_to_the_backup(tmp_path):
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text('{"offsetTable": {"t@g": {"0": 3}}, "slaveCommitTable": {"t@g": {"0": "x"}}}')
    path.with_name(path.name + ".bak").write_text('{"offsetTable": {"t@g": {"0": 2}}}')
    m = ConsumerOffsetManager(tmp_path)
    assert m.load() and m.query_offset("g", "t", 0) == 2 and m.slave_commits == {}
    assert m.last_error is not None and "slaveCommitTable" in m.last_error
