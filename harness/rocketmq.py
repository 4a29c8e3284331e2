"""Apache RocketMQ 4.9.8 from a distribution directory, as a target of the lab's experiments.

A distribution is a directory laid out like RocketMQ's binary release (``bin/mqnamesrv``, ``bin/mqbroker``,
``lib/``): the official ``rocketmq-all-4.9.8-bin-release`` or the build beside the project
(``../shared/rocketmq-4.9.8``). It is found, in this order, at an explicit ``--rocketmq-home DIR``, at
``$ROCKETMQ_HOME``, or beside the repository; a caller that finds none gets the reason (``unavailable``), which
tests turn into a skip and commands into an error.

What this module decides for every RocketMQ process the launcher starts:

- **Its home and logs.** RocketMQ writes ``${user.home}/logs/rocketmqlogs`` and, unless broker.conf says
  otherwise, ``${user.home}/store``: ``-Duser.home`` points into the topology's directory, and the broker's
  conf sets both ``storePathRootDir`` and ``storePathCommitLog``.
- **Its heap.** ``ROCKETMQ_HEAP`` (default 512m here; RocketMQ's own scripts take 8 GiB) is passed as
  ``-Xms``/``-Xmx`` in ``JAVA_OPT_EXT``, which both the official scripts and the shared build put after their
  own options, so it wins in either.
- **Its ports.** The broker binds ``listenPort``, ``listenPort - 2`` (the VIP channel) and ``listenPort + 1``
  (HA): all three must be free.
- **Its process group.** The official ``mqbroker`` runs java from a shell without ``exec``; the process is
  started in a session of its own and signalled as a group, so kill -9, SIGSTOP and SIGTERM reach the JVM
  whichever script started it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final, Literal

from harness.ports import bindable, free_port

BrokerImpl = Literal["reference", "rocketmq"]
IMPLS: Final[tuple[BrokerImpl, ...]] = ("reference", "rocketmq")
HOME_ENV: Final = "ROCKETMQ_HOME"
HEAP_ENV: Final = "ROCKETMQ_HEAP"
DEFAULT_HEAP: Final = "512m"
REPO: Final = Path(__file__).resolve().parents[1]
BESIDE_REPO: Final = REPO.parent / "shared" / "rocketmq-4.9.8"
# RocketMQ's brokers boot in a few seconds, more on a loaded 2-core machine (the JIT is cold).
BOOT_TIMEOUT_S: Final = 60.0


def parse_impls(text: str) -> list[BrokerImpl]:
    """``reference``, ``rocketmq``, ``both`` or a comma-separated list of them, in order, each once; a
    ValueError names an unknown one."""
    out: list[BrokerImpl] = []
    for name in (n.strip() for n in text.split(",")):
        if name == "both":
            out += [i for i in IMPLS if i not in out]
        elif name in IMPLS:
            if name not in out:
                out.append(name)
        elif name:
            raise ValueError(f"unknown broker {name!r}: expected {', '.join(IMPLS)} or both")
    return out


def is_distribution(home: Path) -> bool:
    return (home / "bin" / "mqbroker").is_file() and (home / "bin" / "mqnamesrv").is_file() and (home / "lib").is_dir()


def find_home(explicit: Path | str | None = None) -> Path | None:
    """The distribution to run: ``explicit``, else ``$ROCKETMQ_HOME``, else the one beside the repository."""
    if explicit:
        return Path(explicit).resolve()
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).resolve()
    return BESIDE_REPO if is_distribution(BESIDE_REPO) else None


def unavailable(explicit: Path | str | None = None) -> str | None:
    """Why RocketMQ cannot run here, or None."""
    home = find_home(explicit)
    if home is None:
        return f"no RocketMQ 4.9.8 distribution (--rocketmq-home, ${HOME_ENV}, or {BESIDE_REPO})"
    if not is_distribution(home):
        return f"{home} is not a RocketMQ distribution (no bin/mqbroker, bin/mqnamesrv or lib/)"
    if shutil.which(os.environ.get("JAVA", "java")) is None:
        return "no java on PATH (RocketMQ 4.9.8 needs Java 8-17; the project's setup installs Java 17)"
    return None


def java_env(home: Path, user_home: Path, heap: str | None = None) -> dict[str, str]:
    """The environment of a RocketMQ process whose logs and default paths live under ``user_home``; ``heap``
    (e.g. "2g") over ``$ROCKETMQ_HEAP`` over 512m."""
    heap = heap or os.environ.get(HEAP_ENV, DEFAULT_HEAP)
    extra = os.environ.get("JAVA_OPT_EXT", "")
    user_home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, HOME_ENV: str(home), HEAP_ENV: heap,
            "JAVA_OPT_EXT": f"{extra} -Xms{heap} -Xmx{heap} -Duser.home={user_home}".strip()}


def broker_port() -> int:
    """A ``listenPort`` whose VIP channel (port - 2) and HA port (port + 1) are free too (``free_port`` already
    hands out ports whose next port is free)."""
    for _ in range(100):
        p = free_port()
        if p > 1100 and bindable("127.0.0.1", p - 2):
            return p
    raise RuntimeError("no free port triple for a RocketMQ broker")


def namesrv_args(home: Path, conf: Path) -> list[str]:
    return [str(home / "bin" / "mqnamesrv"), "-c", str(conf)]


def broker_args(home: Path, namesrv_addr: str, conf: Path) -> list[str]:
    return [str(home / "bin" / "mqbroker"), "-n", namesrv_addr, "-c", str(conf)]


def broker_conf_extra(store_root: Path, namesrv_addr: str) -> dict[str, str]:
    """Keys RocketMQ needs that the reference broker takes from its command line or derives."""
    return {"storePathCommitLog": str(store_root / "commitlog"), "namesrvAddr": namesrv_addr}


def jvm_pid(pid: int) -> int:
    """The java process at or under ``pid`` (the official scripts do not ``exec``): what CPU is read from."""
    seen = [pid]
    while seen:
        p = seen.pop(0)
        try:
            if Path(f"/proc/{p}/comm").read_text().strip() == "java":
                return p
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        seen.extend(int(c) for c in children)
    return pid
