"""Why Apache RocketMQ 4.9.8 stores a SEND_MESSAGE whose header lacks a @CFNotNull field (docs/findings.md,
F9's note; the wire differential's "send without a producer group" case): its reflective decoder
(``RemotingCommand.decodeCommandCustomHeader``) does detect the missing field and throws, but catches that per
field, logs "Failed field [...] decoding" and goes on, so the header decodes with the field null. Run with
the distribution's own jars (tests/java/HeaderDecode.java); skipped without the distribution or java. If
this starts failing, RocketMQ enforces the annotation and the findings page is to be corrected."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DRIVER = Path(__file__).resolve().parents[1] / "java" / "HeaderDecode.java"


def test_rocketmq_498_logs_a_missing_not_null_header_field_and_decodes_the_header_anyway(
        rocketmq_home: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Debian: openjdk-17-jdk-headless)")
    done = subprocess.run(["java", "-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp", f"{rocketmq_home}/lib/*",
                           str(DRIVER), "producerGroup"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"threw": None, "decoded": True, "producerGroup": None}
    assert "the custom field <producerGroup> is null" in done.stdout + done.stderr  # detected, logged, ignored
