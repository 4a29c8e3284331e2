"""Run a test module over both implementations of the put path's hot functions (common/compiled.py).

``pytestmark = pytest.mark.usefixtures("put_path")`` plus ``from tests.compiled_paths import put_path`` runs
each test twice: ``pure`` binds the pure-Python reference everywhere the store and broker look the functions
up, ``compiled`` binds the Cython twins (skipped, with the reason, only when they are not built). Within
this process only: the end-to-end tests' brokers choose by ``RMQ_PURE_PYTHON`` (tests/common/test_compiled.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from reference_broker.bench import bare_broker
from reference_broker.common import compiled
from reference_broker.common import java_hash as jh
from reference_broker.common import message as mc
from reference_broker.common import message_batch as mb
from reference_broker.common import record as rec
from reference_broker.remoting import codec
from reference_broker.remoting.codes import SerializeType
from reference_broker.remoting.command import RemotingCommand, json_loads
from reference_broker.store import check, commit_log, index_file, index_service

# (module that binds the name, name, owner, compiled module): every binding the put path calls through.
BINDINGS: list[tuple[ModuleType, str, ModuleType, str]] = [
    (rec, "write_record", rec, "_record_c"),
    (rec, "scan_records", rec, "_record_c"),
    (mc, "string_to_properties", mc, "_message_c"),
    (mc, "bytes_to_properties", mc, "_message_c"),
    (mb, "decode_batch_entries", mb, "_message_batch_c"),
    (commit_log, "decode_batch_entries", mb, "_message_batch_c"),
    (bare_broker, "decode_batch_entries", mb, "_message_batch_c"),
    (jh, "hash_codes", jh, "_index_c"),
    (index_service, "hash_codes", jh, "_index_c"),
    (check, "hash_codes", jh, "_index_c"),
]
NOT_BUILT = "the compiled twins are not built (scripts/build_compiled.py; needs a C compiler and Cython)"


def compiled_module(name: str) -> ModuleType:
    """The built module, bound to its owner's pure functions (binding again is harmless); the test is skipped
    when it is not built."""
    if not compiled.compiled_available(name):
        pytest.skip(NOT_BUILT)
    mod = importlib.import_module(f"reference_broker.common.{name}")
    if name == "_record_c":
        mod.bind(rec.pure_write_record, rec.raw_crc32, rec._HOST_V6_FLAGS, rec.MESSAGE_MAGIC_CODE)
        mod.bind_scan(rec.pure_scan_records, rec.check_message_and_return_size, rec.DispatchRequest, rec.ScanEnd,
                      rec._TOPIC_CACHE, rec._TOPIC_CACHE_MAX, rec.tags_hash_code, rec._dispatch_props,
                      mc.SCHEDULE_TOPIC)
    elif name == "_index_c":
        mod.bind(jh.pure_hash_codes, jh.string_hash_code)
    elif name == "_frame_c":
        mod.bind(RemotingCommand, json_loads, SerializeType.JSON)
    elif name == "_message_c":
        mod.bind(mc.pure_string_to_properties, mc.pure_bytes_to_properties)
    else:
        mod.bind(mb.pure_decode_batch_entries, mb.BatchDecodeError, mb.crc32)
    return mod


@pytest.fixture(params=["pure", "compiled"])
def put_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for module, name, owner, cname in BINDINGS:
        fn = getattr(owner, f"pure_{name}") if request.param == "pure" else getattr(compiled_module(cname), name)
        monkeypatch.setattr(module, name, fn)
    # IndexFile.put_keys's twin has no pure function of the same shape: None selects its numpy reference path.
    monkeypatch.setattr(index_file, "_link_write",
                        None if request.param == "pure" else compiled_module("_index_c").link_write)
    # The frame decoder asks its twin first when there is one (remoting/codec.py): None is the pure path.
    frame_c = None if request.param == "pure" else compiled_module("_frame_c")
    monkeypatch.setattr(codec, "_compiled", frame_c)
    if frame_c is not None:
        monkeypatch.setattr(codec, "_FALLBACK", frame_c.FALLBACK)
    yield request.param


@pytest.fixture(params=["pure", "compiled"])
def broker_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The path the brokers started by this test run (harness.launcher passes this process's environment on):
    ``RMQ_PURE_PYTHON=1``, or unset with the twins built (skipped otherwise)."""
    if request.param == "pure":
        monkeypatch.setenv(compiled.ENV_PURE, "1")
    else:
        if not all(compiled.compiled_available(m) for m in compiled.MODULES):
            pytest.skip(NOT_BUILT)
        monkeypatch.delenv(compiled.ENV_PURE, raising=False)
    return str(request.param)
