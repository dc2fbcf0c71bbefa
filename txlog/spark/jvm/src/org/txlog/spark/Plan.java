package org.txlog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The plan of one batch query, as txlog's Python planner (txlog/scan/planning.py) fixed it.
 *
 * <p>The JVM side plans nothing: which offsets of which partitions, each range's end (the last
 * stable offset under read_committed) and the aborted transactions inside it all come from the
 * planner, passed as the JSON option {@code txlog.plan} (written by txlog/spark/jvm_reader.py).
 */
final class Plan {
    /** The record view's schema in Spark DDL (txlog/spark/schemas.py). */
    final String schemaDdl;
    final boolean failOnDataLoss;
    final List<Range> ranges;

    private Plan(String schemaDdl, boolean failOnDataLoss, List<Range> ranges) {
        this.schemaDdl = schemaDdl;
        this.failOnDataLoss = failOnDataLoss;
        this.ranges = ranges;
    }

    static Plan parse(String json) {
        if (json == null) {
            throw new IllegalArgumentException(
                "the txlog JVM reader needs the option 'txlog.plan' (written by txlog's Python planner: "
                + "read with txlog.spark.read(spark, path, ...) from PySpark)");
        }
        try {
            JsonNode root = new ObjectMapper().readTree(json);
            List<Range> ranges = new ArrayList<>();
            for (JsonNode r : root.get("ranges")) {
                ranges.add(Range.of(r));
            }
            return new Plan(root.get("schema").asText(), root.get("failOnDataLoss").asBoolean(), ranges);
        } catch (IOException | NullPointerException e) {
            throw new IllegalArgumentException("option 'txlog.plan' is not a plan written by txlog: " + e, e);
        }
    }

    /**
     * Whole batches of one segment file: bytes [startPosition, endPosition) of its .log, planned to
     * hold offsets [startOffset, endOffset), on the file with this device and inode whose batch at
     * startPosition has this base offset and CRC (-1 and -1 for an extent without batches): how
     * RangeReader tells the planned file from one a cleaning put under its name (storage/extent.py).
     */
    static final class Extent implements Serializable {
        final String logFile;
        final long baseOffset;
        final long startPosition;
        final long endPosition;
        final long startOffset;
        final long endOffset;
        final long device;
        final long inode;
        final long firstBaseOffset;
        final long firstCrc;

        Extent(JsonNode x) {
            this.logFile = x.get(0).asText();
            this.baseOffset = x.get(1).asLong();
            this.startPosition = x.get(2).asLong();
            this.endPosition = x.get(3).asLong();
            this.startOffset = x.get(4).asLong();
            this.endOffset = x.get(5).asLong();
            this.device = x.get(6).asLong();
            this.inode = x.get(7).asLong();
            this.firstBaseOffset = x.get(8).asLong();
            this.firstCrc = x.get(9).asLong();
        }
    }

    /**
     * Offsets [start, end) of one partition, with the extents holding them and, under
     * read_committed, the aborted transactions overlapping them.
     */
    static final class Range implements Serializable {
        final String topic;
        final int partition;
        final long start;
        final long end;
        final boolean committedOnly;
        /** Rows of (producer id, first offset, ABORT marker offset), sorted by producer then first offset. */
        final long[][] aborted;
        final Extent[] extents;

        Range(String topic, int partition, long start, long end, boolean committedOnly, long[][] aborted,
              Extent[] extents) {
            this.topic = topic;
            this.partition = partition;
            this.start = start;
            this.end = end;
            this.committedOnly = committedOnly;
            this.aborted = aborted;
            this.extents = extents;
        }

        static Range of(JsonNode r) {
            JsonNode a = r.get("aborted");
            long[][] aborted = new long[a.size()][];
            for (int i = 0; i < aborted.length; i++) {
                JsonNode t = a.get(i);
                aborted[i] = new long[] {t.get(0).asLong(), t.get(1).asLong(), t.get(2).asLong()};
            }
            Arrays.sort(aborted, (x, y) -> x[0] != y[0] ? Long.compare(x[0], y[0]) : Long.compare(x[1], y[1]));
            JsonNode e = r.get("extents");
            Extent[] extents = new Extent[e.size()];
            for (int i = 0; i < extents.length; i++) {
                extents[i] = new Extent(e.get(i));
            }
            return new Range(r.get("topic").asText(), r.get("partition").asInt(), r.get("start").asLong(),
                             r.get("end").asLong(), r.get("committedOnly").asBoolean(), aborted, extents);
        }

        /** The same range with other offsets: pushed-down offset filters narrow what is read. */
        Range narrowed(long newStart, long newEnd) {
            return new Range(topic, partition, newStart, newEnd, committedOnly, aborted, extents);
        }
    }
}
