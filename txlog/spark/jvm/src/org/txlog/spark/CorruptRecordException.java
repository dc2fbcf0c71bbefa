package org.txlog.spark;

/** Bytes of a segment that are not what Kafka's format says (Kafka's CorruptRecordException), with file and position. */
public final class CorruptRecordException extends RuntimeException {
    public CorruptRecordException(String file, long position, String detail) {
        super("CorruptRecordError: " + file + " at byte " + position + ": " + detail);
    }
}
