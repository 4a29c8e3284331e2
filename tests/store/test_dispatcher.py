"""Dispatch hooks: one registration, which says whether the hook also runs for what abnormal recovery
re-dispatches; a hook's failure is counted and skipped, never stops dispatch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from reference_broker.common.dispatch import DispatchRequest
from tests.store.store_helpers import Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched

# The default recovers from the checkpoint's offset: a clean shutdown leaves nothing to re-dispatch.
CONFIG = {"mapped_file_size_commit_log": 64 * 1024, "recover_from_checkpoint_offset": False}


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def test_only_hooks_registered_for_recovery_see_the_re_dispatch(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, **CONFIG))
    for i in range(5):
        put_ok(store, make_msg(f"m{i}"))
    store.shutdown()
    stores.opened.remove(store)
    (tmp_path / "abort").touch()  # what a kill -9 leaves: the next load re-dispatches

    both: list[int] = []
    live: list[int] = []
    store = stores.new(make_config(tmp_path, **CONFIG))
    store.add_dispatch_hook(lambda reqs: both.extend(r.commit_log_offset for r in reqs), during_recovery=True)
    store.add_dispatch_hook(lambda reqs: live.extend(r.commit_log_offset for r in reqs), during_recovery=False)
    assert store.load()
    assert not store.last_exit_ok
    assert len(both) == 5 and live == []
    store.start()
    after = put_ok(store, make_msg("live"))
    wait_dispatched(store)
    assert after.append is not None
    assert live == [after.append.wrote_offset]
    assert both[-1] == after.append.wrote_offset


def test_a_removed_hook_no_longer_runs(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, **CONFIG))
    seen: list[str] = []

    def hook(reqs: Sequence[DispatchRequest]) -> None:
        seen.extend(r.topic for r in reqs)

    store.add_dispatch_hook(hook, during_recovery=True)
    put_ok(store, make_msg("one"))
    wait_dispatched(store)
    store.remove_dispatch_hook(hook)
    put_ok(store, make_msg("two"))
    wait_dispatched(store)
    assert len(seen) == 1
    assert store.dispatcher._recovery_hooks == () and store.dispatcher._live_hooks == ()


def test_a_failing_hook_is_counted_and_the_others_still_run(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, **CONFIG))
    seen: list[int] = []

    def broken(reqs: Sequence[DispatchRequest]) -> None:
        raise RuntimeError("a hook's bug")

    store.add_dispatch_hook(broken, during_recovery=False)
    store.add_dispatch_hook(lambda reqs: seen.extend(r.consume_queue_offset for r in reqs), during_recovery=False)
    for i in range(3):
        put_ok(store, make_msg(f"m{i}"))
    wait_dispatched(store)
    assert seen == [0, 1, 2]
    assert store.dispatcher.error_count == 3
    assert store.get_max_offset_in_queue(make_msg().topic, 0) == 3
