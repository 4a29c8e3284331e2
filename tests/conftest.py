"""Session-wide test setup.

Brokers started by the tests use small files (RMQ_LAB_BROKER_CONF below).

The suite runs in parallel under pytest-xdist (``-n auto --dist loadgroup`` in pyproject.toml). Three rules
keep it safe there, applied to every collected test by ``pytest_collection_modifyitems`` below:

- machine-wide state: tests that change or measure what the whole machine shares (sysctl values and the
  sysctl_profiles lock and state file, the page cache, loop devices and mounts: the ``root`` and ``machine``
  markers, and everything under tests/sysctl_profiles/) run on one worker, one after another;
- shared fixtures: tests that use a module-, package- or session-scoped fixture of this suite (a name server
  and broker per module, one SparkSession) run on one worker, so the fixture is built once;
  (the groups reach xdist's scheduler through tests/xdist_groups.py: see there why not by the node ids);
- ports and directories: servers get their ports from harness/ports.py (claimed across processes) and
  every test writes under its own tmp_path.

Importing locust monkey-patches the whole process with gevent (threads become greenlets), and the scenario
tests import locust modules at collection. In this process that would turn every other test's threads —
the servers' event-loop threads among them — into greenlets on the main thread. So locust is imported here
first without the patch (LOCUST_SKIP_MONKEY_PATCH, read only at its import), and the variable is removed
again so the locust processes the scenario tests start are patched as usual.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import xdist_groups

# Small files for every broker the tests start through harness/launcher.py (see env_broker_conf there):
# 64 MiB commit-log files and an 8 MiB index instead of 1 GiB and ~420 MB, all reserved up front.
os.environ.setdefault("RMQ_LAB_BROKER_CONF",
                      "mappedFileSizeCommitLog=67108864;maxHashSlotNum=100000;maxIndexNum=400000")

os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
try:
    import locust  # noqa: F401
finally:
    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]


MACHINE_GROUP = "machine"


def _group(item: pytest.Item) -> str | None:
    path = item.nodeid.split("::")[0]
    if path.startswith("tests/sysctl_profiles/") or item.get_closest_marker("root") \
            or item.get_closest_marker("machine"):
        return MACHINE_GROUP
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    widest: str | None = None
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if not defs or not defs[-1].baseid.startswith("tests"):
            continue  # pytest's own fixtures (tmp_path_factory is session-scoped too)
        fixture = defs[-1]
        if fixture.scope in ("session", "package"):
            return fixture.baseid  # one per run (or package): every user on one worker
        if fixture.scope == "module":
            widest = path
    return widest


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        xdist_groups.write_groups(items, worker["workerid"])


def pytest_configure(config: pytest.Config) -> None:
    # On the controller of a parallel run, before it starts the workers (they inherit the variable).
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no":
        os.environ[xdist_groups.GROUPS_DIR_ENV] = tempfile.mkdtemp(prefix="rmq-lab-xdist-groups-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and xdist_groups.GROUPS_DIR_ENV in os.environ:
        shutil.rmtree(os.environ.pop(xdist_groups.GROUPS_DIR_ENV), ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist") != "loadgroup" or xdist_groups.GROUPS_DIR_ENV not in os.environ:
        return None  # xdist's own
    return xdist_groups.make_scheduler(config, log)


@pytest.fixture(scope="session")
def rocketmq_home() -> Path:
    """The Apache RocketMQ distribution the tests run against; the test is skipped, with the reason, when there
    is none (harness/rocketmq.py: $ROCKETMQ_HOME or ../shared/rocketmq-4.9.8) or no java."""
    from harness import rocketmq

    reason = rocketmq.unavailable()
    if reason is not None:
        pytest.skip(reason)
    home = rocketmq.find_home()
    assert home is not None
    return home
