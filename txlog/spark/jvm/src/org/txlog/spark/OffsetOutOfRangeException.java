package org.txlog.spark;

/** Planned data that is gone (Kafka's OffsetOutOfRangeException): what failOnDataLoss=true reports. */
public final class OffsetOutOfRangeException extends RuntimeException {
    public OffsetOutOfRangeException(String message) {
        super("OffsetOutOfRangeError: " + message);
    }
}
