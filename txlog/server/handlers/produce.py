"""Produce: batches validated (CRC, sequence, epoch) and appended as received."""
