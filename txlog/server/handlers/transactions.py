"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeProducers, ListTransactions, DescribeTransactions."""
