"""kcat (librdkafka's command-line client) end to end: `-L` metadata, produce lines with `-P`, and
consume them back with `-C -X isolation.level=read_committed`, an aborted transaction unseen."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.server.client_checks import assert_exactly_once, input_values, record_count, write_aborted
from tests.server.endpoints import topic_name

KCAT_TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (Debian package kcat; .ci/run installs it)"
)


def _kcat(*args: str, input: str | None = None) -> str:
    result = subprocess.run(["kcat", *args], input=input, capture_output=True, text=True, timeout=KCAT_TIMEOUT_S)
    assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def test_kcat_lists_produces_and_reads_back_committed_lines(endpoint, request, big):
    n = record_count(200, big)
    topic = topic_name(request.node.nodeid, "t")
    endpoint.create_topic(topic, 3)

    metadata = _kcat("-b", endpoint.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 3 partitions' in metadata
    assert "1 brokers:" in metadata

    lines = input_values(n)
    _kcat("-b", endpoint.bootstrap, "-P", "-t", topic, "-X", "enable.idempotence=true", input="\n".join(lines) + "\n")
    write_aborted(endpoint.bootstrap, topic, ["aborted"] * 9)
    read = _kcat(
        "-b", endpoint.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n",
        "-X", "isolation.level=read_committed",
    )  # fmt: skip
    assert_exactly_once(lines, read.splitlines())
    uncommitted = _kcat(
        "-b", endpoint.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s\n",
        "-X", "isolation.level=read_uncommitted",
    )  # fmt: skip
    assert uncommitted.splitlines().count("aborted") == 9  # written, and hidden from read_committed
