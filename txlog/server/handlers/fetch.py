"""Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords: reading the log over the wire."""
