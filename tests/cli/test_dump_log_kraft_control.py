"""KRaft control records print as Kafka 4.4's kafka-dump-log prints them: `LeaderChange: {json}`,
`KRaftVersion {json}`, `KRaftVoters {json}`.

The batch is the first one a Kafka 4.4 broker wrote to its `__cluster_metadata` log (node 1
elected, kraft.version 1, one voter); the expected lines are DumpLogSegments' own for it.
"""

from __future__ import annotations

from tests.cli.cli_helpers import assert_ok, txlog

FIRST_METADATA_BATCH = bytes.fromhex(
    "0000000000000000000000a2000000010221cdaadb002000000002000001a21842101f000001a21842101fffffffffffff"
    "ffffffffffffffff000000033a00000008000000022600000000000102000000010002000000010000001e0000020800"
    "0000050a000000010000820100000408000000066e00000200000001659dfb1cbd084ca0a14779d02a663bec020b434f"
    "4e54524f4c4c45520a3132372e302e302e31da95000000000100000000"
)
PREFIX = "CreateTime: 1795703312415 keySize: 4"


def test_kraft_control_records_print_as_json(tmp_path):
    log = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(FIRST_METADATA_BATCH)
    proc = txlog("inspect", "--deep-iteration", str(log))
    assert_ok(proc)
    assert proc.stdout.splitlines()[3:] == [
        f"| offset: 0 {PREFIX} valueSize: 19 sequence: -1 headerKeys: [] LeaderChange: "
        '{"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}',
        f'| offset: 1 {PREFIX} valueSize: 5 sequence: -1 headerKeys: [] KRaftVersion {{"version":0,"kRaftVersion":1}}',
        f"| offset: 2 {PREFIX} valueSize: 55 sequence: -1 headerKeys: [] KRaftVoters "
        '{"version":0,"voters":[{"voterId":1,"voterDirectoryId":"ZZ37HL0ITKChR3nQKmY77A","endpoints":'
        '[{"name":"CONTROLLER","host":"127.0.0.1","port":55957}],'
        '"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}',
    ]
