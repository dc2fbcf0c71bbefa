"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, and describing producers and transactions."""
