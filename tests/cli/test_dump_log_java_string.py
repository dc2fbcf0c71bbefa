"""Keys and payloads with malformed UTF-8 print as Kafka's StringDecoder (`new String(bytes, UTF_8)`) prints them.

The expected code points were printed by Java 17 (OpenJDK 17.0.15) for the same bytes; Python's
`errors="replace"` differs on several (`ED BF 4A`, a surrogate's bytes, a truncated tail). The
whole-file comparison with Kafka's tool is tests/kafka_rig/test_txlog_data_dump.py.
"""

from __future__ import annotations

import pytest

from cli.dump_log import java_string


@pytest.mark.parametrize(
    ("hex_bytes", "java_code_points"),
    [
        ("edbf4a", "FFFD 004A"),
        ("eda080", "FFFD"),
        ("e08080", "FFFD FFFD FFFD"),
        ("f0808080", "FFFD FFFD FFFD FFFD"),
        ("f4908080", "FFFD FFFD FFFD FFFD"),
        ("c0af", "FFFD FFFD"),
        ("616263e282", "0061 0062 0063 FFFD"),
        ("616263f09f98", "0061 0062 0063 FFFD"),
        ("f09f41", "FFFD 0041"),
        ("e228a1", "FFFD 0028 FFFD"),
        ("fffe", "FFFD FFFD"),
        ("e282", "FFFD"),
        ("f09f", "FFFD"),
        ("f0", "FFFD"),
        ("e2", "FFFD"),
        ("c2", "FFFD"),
        ("c241", "FFFD 0041"),
        ("ed9fbf", "D7FF"),
        ("f4808080", "100000"),
        ("f5808080", "FFFD FFFD FFFD FFFD"),
        ("f09f98", "FFFD"),
        ("80", "FFFD"),
        ("e2828241", "2082 0041"),
        ("f0908080", "10000"),
        ("efbfbd", "FFFD"),
        ("e080", "FFFD FFFD"),
        ("eda0", "FFFD"),
        ("f490", "FFFD FFFD"),
        ("f4", "FFFD"),
        ("f08f", "FFFD FFFD"),
        ("e0a0", "FFFD"),
        ("ed", "FFFD"),
        ("a0", "FFFD"),
        ("c1bf", "FFFD FFFD"),
        ("efbf", "FFFD"),
        ("edbfbf", "FFFD"),
        ("c3a9", "00E9"),
    ],
)
def test_malformed_bytes_are_replaced_as_java_replaces_them(hex_bytes: str, java_code_points: str) -> None:
    text = java_string(bytes.fromhex(hex_bytes))
    assert " ".join(f"{ord(c):04X}" for c in text) == java_code_points
