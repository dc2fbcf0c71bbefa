package org.txlog.spark;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

/**
 * One planned range, straight from its segment files, as Spark columnar batches.
 *
 * <p>The walk is txlog.fetch.visible_batches and visible_records: batches wholly before the
 * range's start are passed over, the first batch at or past its end stops the read, control
 * batches are dropped, and under read_committed a transactional batch is dropped when an
 * aborted transaction of the plan (same producer, first offset to ABORT marker) spans it. That
 * is all the JVM knows of visibility; which ranges, where they end (the LSO) and which
 * transactions aborted were fixed by the Python planner (txlog/scan/planning.py).
 * tests/spark/test_spark_jvm.py holds the result to txlog.Consumer's.
 */
final class RangeReader implements PartitionReader<ColumnarBatch> {
    /** Rows per ColumnarBatch (Spark's own columnar readers use 4096). */
    static final int ROWS_PER_BATCH = 4096;

    private final Plan.Range range;
    private final boolean failOnDataLoss;
    private final Columns columns;
    private final long minTimestampMillis;
    private int extentIndex = -1;
    private ByteBuffer segment;
    private int at;
    private String file;
    private long fileStart;
    /** Offsets kept of the current segment: all of a planned extent, the extent's own of a re-read one. */
    private long extentStartOffset = Long.MIN_VALUE;
    private long extentEndOffset = Long.MAX_VALUE;
    private boolean done;
    private ColumnarBatch current;

    RangeReader(Plan.Range range, StructType schema, boolean failOnDataLoss, long minTimestampMillis) {
        this.range = range;
        this.failOnDataLoss = failOnDataLoss;
        this.columns = new Columns(schema, range.topic, range.partition);
        this.minTimestampMillis = minTimestampMillis;
    }

    @Override
    public boolean next() throws IOException {
        columns.reset();
        while (!done && columns.rows < ROWS_PER_BATCH) {
            LogBatch batch = nextBatch();
            if (batch == null) {
                done = true;
            } else if (batch.lastOffset() < range.start) {
                continue;  // wholly before the range: its aborts closed before the range began
            } else if (batch.baseOffset >= range.end) {
                done = true;
            } else if (visible(batch) && batch.maxTimestamp >= minTimestampMillis) {
                columns.add(batch, range.start, range.end);
            }
        }
        current = columns.batch();
        return columns.rows > 0;  // the loop above ends with rows or at the range's end
    }

    /** Whether a read of this range's isolation level shows the batch (txlog.fetch.AbortedFilter's outcome). */
    private boolean visible(LogBatch batch) {
        if (batch.isControl()) {
            return false;
        }
        return !(range.committedOnly && batch.isTransactional() && batch.producerId >= 0 && aborted(batch));
    }

    /** Whether an aborted transaction of the batch's producer spans it: first offset ≤ its last, marker ≥ its base. */
    private boolean aborted(LogBatch batch) {
        long[][] txns = range.aborted;
        int lo = 0;
        int hi = txns.length - 1;
        int found = -1;  // the last entry ≤ (producer id, batch's last offset)
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            long[] t = txns[mid];
            int cmp = t[0] != batch.producerId ? Long.compare(t[0], batch.producerId)
                                               : Long.compare(t[1], batch.lastOffset());
            if (cmp <= 0) {
                found = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return found >= 0 && txns[found][0] == batch.producerId && txns[found][2] >= batch.baseOffset;
    }

    /** The next batch of the planned extents, in file order; null after the last. */
    private LogBatch nextBatch() throws IOException {
        while (true) {
            while (segment == null || at >= segment.limit()) {
                if (++extentIndex >= range.extents.length) {
                    return null;
                }
                open(range.extents[extentIndex]);
            }
            if (segment.limit() - at < 8 || segment.getLong(at) >= extentEndOffset) {
                at = segment.limit();  // a re-read segment: the rest belongs to later extents (or is in flight)
                continue;
            }
            LogBatch batch = new LogBatch(segment, at, segment.limit(), file, fileStart + at);
            at += batch.size;
            if (batch.lastOffset() >= extentStartOffset) {
                return batch;
            }
        }
    }

    /**
     * Map the extent's bytes when its file is still the one it was planned on; else read its
     * offsets from the segment now holding them ({@link #reread}).
     *
     * <p>The planned file is known by device and inode (looked up by path before and after the
     * open, so the descriptor opened between is that file) and by the base offset and CRC of the
     * batch at the extent's start, read from the mapped bytes: a cleaning's file may get the inode
     * of one it replaced earlier once that one is unlinked.
     */
    private void open(Plan.Extent extent) throws IOException {
        segment = null;
        file = extent.logFile;
        fileStart = extent.startPosition;
        at = 0;
        extentStartOffset = Long.MIN_VALUE;
        extentEndOffset = Long.MAX_VALUE;
        long length = extent.endPosition - extent.startPosition;
        if (length > Integer.MAX_VALUE) {
            throw new CorruptRecordException(file, extent.startPosition, "an extent of " + length
                + " bytes is larger than one mapping can hold (2 GiB)");
        }
        Path path = Paths.get(file);
        try {
            if (!plannedInode(path, extent)) {
                reread(extent);
                return;
            }
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
                if (!plannedInode(path, extent) || channel.size() < extent.endPosition) {
                    reread(extent);
                    return;
                }
                MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_ONLY, extent.startPosition, length);
                if (!plannedFirstBatch(mapped, extent)) {
                    reread(extent);
                    return;
                }
                segment = mapped;
            }
        } catch (NoSuchFileException e) {
            reread(extent);
        }
    }

    private static boolean plannedInode(Path path, Plan.Extent extent) throws IOException {
        return ((Number) Files.getAttribute(path, "unix:ino")).longValue() == extent.inode
            && ((Number) Files.getAttribute(path, "unix:dev")).longValue() == extent.device;
    }

    private static boolean plannedFirstBatch(ByteBuffer mapped, Plan.Extent extent) {
        if (mapped.limit() == 0) {
            return extent.firstBaseOffset == -1;
        }
        return mapped.limit() >= LogBatch.HEADER_SIZE && mapped.getLong(0) == extent.firstBaseOffset
            && (mapped.getInt(17) & 0xffffffffL) == extent.firstCrc;
    }

    /** How many times one extent's offsets are looked for again before the read gives up. */
    private static final int MAX_REREADS = 8;

    /**
     * The extent's offsets [startOffset, endOffset) from the segment file that holds them now: its
     * file was replaced (or merged into an earlier segment) by a cleaning since the plan. Offsets
     * never change and cleaning only merges whole segments, so they all lie in the segment with the
     * greatest base offset at or below the planned one (see {@link #holdingSegment}); it is walked
     * from its first byte and only batches of those offsets are kept (the plan's aborted
     * transactions still hold for them). With no such segment, retention deleted the offsets:
     * data loss, as failOnDataLoss says.
     */
    private void reread(Plan.Extent extent) throws IOException {
        Path directory = Paths.get(extent.logFile).getParent();
        for (int attempt = 0; attempt < MAX_REREADS; attempt++) {
            Path path = holdingSegment(directory, extent.baseOffset);
            if (path == null) {
                if (failOnDataLoss) {
                    throw new OffsetOutOfRangeException("segment " + extent.baseOffset + " of " + range.topic + "-"
                        + range.partition + " was deleted after the query was planned (retention); "
                        + "set failOnDataLoss=false to skip what was lost");
                }
                segment = ByteBuffer.allocate(0);
                return;
            }
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
                long size = channel.size();
                if (size > Integer.MAX_VALUE) {
                    throw new CorruptRecordException(path.toString(), 0, "a segment of " + size
                        + " bytes is larger than one mapping can hold (2 GiB)");
                }
                segment = channel.map(FileChannel.MapMode.READ_ONLY, 0, size);
            } catch (NoSuchFileException e) {
                continue;  // its swap ended (renamed), or another cleaning merged it: look again
            }
            file = path.toString();
            fileStart = 0;
            at = 0;
            extentStartOffset = extent.startOffset;
            extentEndOffset = extent.endOffset;
            return;
        }
        throw new IllegalStateException(extent.logFile + " was replaced by cleanings " + MAX_REREADS
            + " times while it was read; rerun the query");
    }

    /**
     * The segment file holding {@code baseOffset} now: the greatest base offset at or below it among
     * the directory's {@code .log} and {@code .log.swap} files; null if none.
     *
     * <p>A {@code .log.swap} is a cleaned group in the middle of its swap (docs/kafka-formats.md
     * §11.4): written and fsynced whole before it got that name, and from step 3 on the only file
     * holding the group's offsets, so on equal bases it is taken over the {@code .log}, which by
     * then may hold only the first of the group's old segments.
     */
    private Path holdingSegment(Path directory, long baseOffset) throws IOException {
        long found = -1;
        Path holder = null;
        try (DirectoryStream<Path> logs = Files.newDirectoryStream(directory, "*.{log,log.swap}")) {
            for (Path p : logs) {
                String name = p.getFileName().toString();
                boolean swap = name.endsWith(".log.swap");
                if (name.length() != (swap ? 29 : 24) || !name.chars().limit(20).allMatch(Character::isDigit)) {
                    continue;
                }
                long base = Long.parseLong(name.substring(0, 20));
                if (base <= baseOffset && (base > found || (base == found && swap))) {
                    found = base;
                    holder = p;
                }
            }
        } catch (NoSuchFileException e) {
            throw new IllegalStateException("segment " + baseOffset + " of " + range.topic + "-" + range.partition
                + " changed after the query was planned and its partition directory " + directory
                + " is gone; rerun the query");
        }
        return holder;
    }

    @Override
    public ColumnarBatch get() {
        return current;
    }

    @Override
    public void close() {
        columns.close();
    }

    /** The requested columns of the rows gathered so far. */
    static final class Columns {
        private final StructType schema;
        private final String topic;
        private final int partition;
        private final WritableColumnVector[] vectors;
        private final WritableColumnVector key;
        private final WritableColumnVector value;
        private final WritableColumnVector offset;
        private final WritableColumnVector timestamp;
        private final WritableColumnVector timestampType;
        private final WritableColumnVector headers;
        // The headers' element fields Spark asked for: nested-schema pruning may hand us a struct
        // of `key` alone or `value` alone (explode(headers).key, headers.value), so each is found
        // by name in the requested element type; -1 = not requested, read past and not written.
        private final int headerKeyField;
        private final int headerValueField;
        private final WritableColumnVector producerId;
        private final WritableColumnVector producerEpoch;
        private final WritableColumnVector sequence;
        private final WritableColumnVector isTransactional;
        int rows;

        Columns(StructType schema, String topic, int partition) {
            this.schema = schema;
            this.topic = topic;
            this.partition = partition;
            vectors = new WritableColumnVector[schema.fields().length];
            for (int i = 0; i < vectors.length; i++) {
                String name = schema.fields()[i].name();
                if (!name.equals("topic") && !name.equals("partition")) {
                    vectors[i] = new OnHeapColumnVector(ROWS_PER_BATCH, schema.fields()[i].dataType());
                }
            }
            key = vector("key");
            value = vector("value");
            offset = vector("offset");
            timestamp = vector("timestamp");
            timestampType = vector("timestampType");
            headers = vector("headers");
            StructType headerFields = headers == null ? null : headerElement(schema);
            headerKeyField = fieldIndex(headerFields, "key");
            headerValueField = fieldIndex(headerFields, "value");
            producerId = vector("producerId");
            producerEpoch = vector("producerEpoch");
            sequence = vector("sequence");
            isTransactional = vector("isTransactional");
        }

        /** The element struct of the requested `headers` column (array of struct, possibly pruned). */
        private static StructType headerElement(StructType schema) {
            DataType type = schema.fields()[schema.fieldIndex("headers")].dataType();
            return (StructType) ((ArrayType) type).elementType();
        }

        private static int fieldIndex(StructType struct, String name) {
            if (struct == null) {
                return -1;
            }
            String[] names = struct.fieldNames();
            for (int i = 0; i < names.length; i++) {
                if (names[i].equals(name)) {
                    return i;
                }
            }
            return -1;
        }

        private WritableColumnVector vector(String name) {
            for (int i = 0; i < vectors.length; i++) {
                if (schema.fields()[i].name().equals(name)) {
                    return vectors[i];
                }
            }
            return null;
        }

        void reset() {
            for (WritableColumnVector v : vectors) {
                if (v != null) {
                    v.reset();
                }
            }
            rows = 0;
        }

        ColumnarBatch batch() {
            ColumnVector[] out = new ColumnVector[vectors.length];
            for (int i = 0; i < out.length; i++) {
                String name = schema.fields()[i].name();
                if (name.equals("topic")) {
                    ConstantColumnVector c = new ConstantColumnVector(rows, DataTypes.StringType);
                    c.setUtf8String(UTF8String.fromString(topic));
                    out[i] = c;
                } else if (name.equals("partition")) {
                    ConstantColumnVector c = new ConstantColumnVector(rows, DataTypes.IntegerType);
                    c.setInt(partition);
                    out[i] = c;
                } else {
                    out[i] = vectors[i];
                }
            }
            return new ColumnarBatch(out, rows);
        }

        /** The batch's records at offsets in [start, end): a batch is decompressed and decoded only when shown. */
        void add(LogBatch batch, long start, long end) {
            if (batch.recordsCount < 0) {
                throw batch.corrupt("negative record count " + batch.recordsCount);
            }
            if (batch.recordsCount == 0) {
                return;  // emptied by compaction: only the header survives
            }
            if (vectors.length == 0 && batch.baseOffset >= start && batch.lastOffset() < end) {
                // count(): no column is read, and a batch inside the range is taken whole (visible_records),
                // so its CRC-checked header's count is the row count without decompressing a byte
                rows += batch.recordsCount;
                return;
            }
            byte[] data = batch.records();
            Cursor c = new Cursor(data, batch);
            boolean logAppend = batch.isLogAppendTime();
            for (int i = 0; i < batch.recordsCount; i++) {
                int length = c.varint();
                int recordEnd = c.pos + length;
                if (length < 0 || recordEnd > data.length) {
                    throw batch.corrupt("record " + i + " of " + length + " bytes overruns the records region of "
                                        + data.length + " bytes");
                }
                c.pos++;  // attributes: unused
                long timestampDelta = c.varlong();
                long recordOffset = batch.baseOffset + c.varint();
                if (recordOffset < start || recordOffset >= end) {
                    c.pos = recordEnd;
                    continue;
                }
                int keyLength = c.varint();
                int keyAt = c.skip(keyLength);
                int valueLength = c.varint();
                int valueAt = c.skip(valueLength);
                if (key != null) {
                    appendBytes(key, data, keyAt, keyLength);
                }
                if (value != null) {
                    appendBytes(value, data, valueAt, valueLength);
                }
                int headerCount = c.varint();
                if (headers != null) {
                    appendHeaders(c, headerCount);
                } else {
                    skipHeaders(c, headerCount);
                }
                if (c.pos != recordEnd) {
                    throw batch.corrupt("record " + i + " says " + length + " bytes but holds "
                                        + (c.pos - recordEnd + length));
                }
                appendRecord(batch, recordOffset, logAppend ? batch.maxTimestamp
                                                            : batch.baseTimestamp + timestampDelta);
            }
            if (c.pos != data.length) {
                throw batch.corrupt((data.length - c.pos) + " bytes follow the batch's " + batch.recordsCount
                                    + " records");
            }
        }

        private void appendRecord(LogBatch batch, long recordOffset, long timestampMillis) {
            if (offset != null) {
                offset.appendLong(recordOffset);
            }
            if (timestamp != null) {
                timestamp.appendLong(timestampMillis * 1000L);  // Kafka: epoch ms; Spark: epoch µs
            }
            if (timestampType != null) {
                timestampType.appendInt(batch.isLogAppendTime() ? 1 : 0);
            }
            // each transaction column on its own: a query may select some of them (pruning)
            if (producerId != null) {
                producerId.appendLong(batch.producerId);
            }
            if (producerEpoch != null) {
                producerEpoch.appendInt(batch.producerEpoch);
            }
            if (sequence != null) {
                sequence.appendInt(sequenceOf(batch.baseSequence, (int) (recordOffset - batch.baseOffset)));
            }
            if (isTransactional != null) {
                isTransactional.appendBoolean(batch.isTransactional());
            }
            rows++;
        }

        /** storage/sequence.py inc_seq: past Integer.MAX_VALUE the sequence wraps to 0, as Kafka's. */
        private static int sequenceOf(int base, int delta) {
            if (base < 0) {
                return -1;
            }
            return base > Integer.MAX_VALUE - delta ? delta - (Integer.MAX_VALUE - base) - 1 : base + delta;
        }

        private static void appendBytes(WritableColumnVector v, byte[] data, int at, int length) {
            if (length < 0) {
                v.appendNull();
            } else {
                v.appendByteArray(data, at, length);
            }
        }

        /** Spark's Kafka source gives null, not an empty array, for a record without headers. */
        private void appendHeaders(Cursor c, int count) {
            if (count < 0) {
                throw c.batch.corrupt("negative header count " + count);
            }
            if (count == 0) {
                headers.appendNull();
                return;
            }
            headers.appendArray(count);
            WritableColumnVector elements = headers.arrayData();
            for (int h = 0; h < count; h++) {
                int keyLength = c.varint();
                if (keyLength < 0) {
                    throw c.batch.corrupt("a header key of length " + keyLength);
                }
                int keyAt = c.skip(keyLength);
                int valueLength = c.varint();
                int valueAt = c.skip(valueLength);
                elements.appendStruct(false);
                if (headerKeyField >= 0) {
                    elements.getChild(headerKeyField).appendByteArray(c.data, keyAt, keyLength);
                }
                if (headerValueField >= 0) {
                    appendBytes(elements.getChild(headerValueField), c.data, valueAt, valueLength);
                }
            }
        }

        private static void skipHeaders(Cursor c, int count) {
            if (count < 0) {
                throw c.batch.corrupt("negative header count " + count);
            }
            for (int h = 0; h < count; h++) {
                c.skip(c.varint());
                c.skip(c.varint());
            }
        }

        void close() {
            for (WritableColumnVector v : vectors) {
                if (v != null) {
                    v.close();
                }
            }
        }
    }

    /** A bounds-checked position in a records region: ZigZag varints (docs/kafka-formats.md §2). */
    static final class Cursor {
        final byte[] data;
        final LogBatch batch;
        int pos;

        Cursor(byte[] data, LogBatch batch) {
            this.data = data;
            this.batch = batch;
        }

        int varint() {
            long v = varlong();
            if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                throw batch.corrupt("varint " + v + " out of int range at byte " + pos + " of the records region");
            }
            return (int) v;
        }

        long varlong() {
            long raw = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (pos >= data.length) {
                    throw batch.corrupt("records region of " + data.length + " bytes ends inside a record");
                }
                byte b = data[pos++];
                raw |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return (raw >>> 1) ^ -(raw & 1);
                }
            }
            throw batch.corrupt("varint longer than 10 bytes at byte " + pos + " of the records region");
        }

        /** Step over a length-prefixed field; returns where it starts (a negative length is null: nothing). */
        int skip(int length) {
            int start = pos;
            if (length > 0) {
                if (length > data.length - pos) {
                    throw batch.corrupt("a field of " + length + " bytes overruns the records region at byte " + pos);
                }
                pos += length;
            }
            return start;
        }
    }
}
