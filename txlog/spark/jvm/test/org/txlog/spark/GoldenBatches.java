package org.txlog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;

/**
 * The golden corpus (tests/golden/) read by the JVM reader's own classes: {@link LogBatch} for
 * the header and CRC, its {@code records()} for decompression, and {@link RangeReader.Columns},
 * the loop that fills Spark's column vectors, for the records, with every column of the record
 * view. The same files are held to the same manifest by the Rust core and the Python codecs,
 * so a format change fails in all three at once.
 *
 * <p>Run by tests/spark/test_jvm_golden.py:
 * {@code java -cp <pyspark's jars>:<the reader's jar>:<this class> org.txlog.spark.GoldenBatches
 * <tests/golden> <the record view's DDL with headers and transaction columns>}. It prints one line
 * per file that is read otherwise than the manifest says, then "N passed, M failed", and exits 1
 * if any failed.
 *
 * <p>A damaged file's stage is found by what the reader does, never by its message: {@code frame}
 * when LogBatch refuses the header with the CRC check off, {@code crc} when only the check refuses
 * it, {@code decompress} when {@code records()} fails, {@code records} when filling the columns
 * fails. Each refusal must be a {@link CorruptRecordException}; anything else is a reader bug.
 */
public final class GoldenBatches {
    private static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    private static final HexFormat HEX = HexFormat.of();

    private GoldenBatches() {
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: GoldenBatches <tests/golden directory> <record view DDL>");
            System.exit(2);
        }
        Path dir = Paths.get(args[0]);
        StructType schema = StructType.fromDDL(args[1]);
        JsonNode manifest = new ObjectMapper().readTree(dir.resolve("manifest.json").toFile());
        Path batches = dir.resolve(manifest.get("batches_dir").asText());
        int passed = 0;
        List<String> failures = new ArrayList<>();
        for (JsonNode entry : manifest.get("batches")) {
            String name = entry.get("file").asText();
            byte[] data = Files.readAllBytes(batches.resolve(name));
            String why;
            try {
                why = entry.has("error") ? checkDamaged(data, name, entry, schema) : checkValid(data, name, entry, schema);
            } catch (RuntimeException e) {
                why = "the reader threw " + e;
            }
            if (why == null) {
                passed++;
            } else {
                failures.add(name + ": " + why);
            }
        }
        failures.forEach(System.out::println);
        System.out.println(passed + " passed, " + failures.size() + " failed");
        System.exit(failures.isEmpty() && passed > 0 ? 0 : 1);
    }

    // ---- valid batches

    /** Null when the file reads as the manifest says, else the first difference. */
    private static String checkValid(byte[] data, String name, JsonNode entry, StructType schema) {
        LogBatch batch = new LogBatch(ByteBuffer.wrap(data), 0, data.length, name, 0);
        JsonNode h = entry.get("header");
        if (batch.size != data.length || batch.size != entry.get("size").asLong()) {
            return "batch of " + batch.size + " bytes in a file of " + data.length + ", manifest says " + entry.get("size");
        }
        long[] got = {batch.baseOffset, batch.size - 12, batch.attributes, batch.lastOffsetDelta, batch.baseTimestamp,
                      batch.maxTimestamp, batch.producerId, batch.producerEpoch, batch.baseSequence, batch.recordsCount};
        String[] names = {"base_offset", "batch_length", "attributes", "last_offset_delta", "base_timestamp",
                          "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count"};
        for (int i = 0; i < names.length; i++) {
            if (got[i] != h.get(names[i]).asLong()) {
                return "header " + names[i] + " is " + got[i] + ", manifest says " + h.get(names[i]);
            }
        }
        String flags = CODECS[Math.min(batch.attributes & 0x07, 4)] + " "
                       + (batch.isLogAppendTime() ? "LogAppendTime" : "CreateTime") + " "
                       + batch.isTransactional() + " " + batch.isControl();
        String want = entry.get("compression").asText() + " " + entry.get("timestamp_type").asText() + " "
                      + entry.get("transactional").asBoolean() + " " + entry.get("control").asBoolean();
        if (!flags.equals(want)) {
            return "attributes say " + flags + ", manifest says " + want;
        }
        RangeReader.Columns columns = new RangeReader.Columns(schema, "golden", 0);
        try {
            columns.add(batch, Long.MIN_VALUE, Long.MAX_VALUE);
            return compareRows(columns.batch(), schema, entry, batch.isLogAppendTime() ? 1 : 0);
        } finally {
            columns.close();
        }
    }

    private static String compareRows(ColumnarBatch rows, StructType schema, JsonNode entry, int timestampType) {
        JsonNode records = entry.get("records");
        if (rows.numRows() != records.size()) {
            return rows.numRows() + " records, manifest says " + records.size();
        }
        JsonNode h = entry.get("header");
        for (int i = 0; i < rows.numRows(); i++) {
            JsonNode r = records.get(i);
            String got = String.join(" | ",
                hex(column(rows, schema, "key"), i), hex(column(rows, schema, "value"), i),
                column(rows, schema, "topic").getUTF8String(i) + "-" + column(rows, schema, "partition").getInt(i),
                Long.toString(column(rows, schema, "offset").getLong(i)),
                Long.toString(column(rows, schema, "timestamp").getLong(i)),
                Integer.toString(column(rows, schema, "timestampType").getInt(i)),
                headers(column(rows, schema, "headers"), i),
                Long.toString(column(rows, schema, "producerId").getLong(i)),
                Integer.toString(column(rows, schema, "producerEpoch").getInt(i)),
                Integer.toString(column(rows, schema, "sequence").getInt(i)),
                Boolean.toString(column(rows, schema, "isTransactional").getBoolean(i)));
            String want = String.join(" | ",
                text(r.get("key")), text(r.get("value")), "golden-0",
                r.get("offset").asText(),
                Long.toString(r.get("timestamp").asLong() * 1000L),  // Spark timestamps are epoch µs
                Integer.toString(timestampType),
                expectedHeaders(r.get("headers")),
                h.get("producer_id").asText(), h.get("producer_epoch").asText(), r.get("sequence").asText(),
                entry.get("transactional").asText());
            if (!got.equals(want)) {
                return "record " + i + " is [" + got + "], manifest says [" + want + "]";
            }
        }
        return null;
    }

    private static ColumnVector column(ColumnarBatch rows, StructType schema, String name) {
        return rows.column(schema.fieldIndex(name));
    }

    private static String hex(ColumnVector v, int row) {
        return v.isNullAt(row) ? "null" : HEX.formatHex(v.getBinary(row));
    }

    private static String text(JsonNode hexOrNull) {
        return hexOrNull.isNull() ? "null" : hexOrNull.asText();
    }

    /** Spark's Kafka source gives null, not an empty array, for a record without headers. */
    private static String headers(ColumnVector v, int row) {
        if (v.isNullAt(row)) {
            return "[]";
        }
        ColumnarArray array = v.getArray(row);
        List<String> out = new ArrayList<>();
        for (int j = 0; j < array.numElements(); j++) {
            InternalRow header = array.getStruct(j, 2);  // (key, value)
            out.add(HEX.formatHex(header.getUTF8String(0).getBytes()) + "="
                    + (header.isNullAt(1) ? "null" : HEX.formatHex(header.getBinary(1))));
        }
        return out.toString();
    }

    private static String expectedHeaders(JsonNode headers) {
        List<String> out = new ArrayList<>();
        for (JsonNode header : headers) {
            out.add(header.get("key").asText() + "=" + text(header.get("value")));
        }
        return out.toString();
    }

    // ---- damaged batches

    private static String checkDamaged(byte[] data, String name, JsonNode entry, StructType schema) {
        String want = entry.get("error").get("kind").asText();
        String got = stage(data, name, schema);
        return Objects.equals(got, want) ? null : "fails at " + got + ", manifest says " + want;
    }

    /** The stage at which the reader refuses {@code data}; "none" when it reads the batch. */
    private static String stage(byte[] data, String name, StructType schema) {
        ByteBuffer buf = ByteBuffer.wrap(data);
        try {
            new LogBatch(buf, 0, data.length, name, 0, false);
        } catch (CorruptRecordException e) {
            return "frame";
        }
        LogBatch batch;
        try {
            batch = new LogBatch(buf, 0, data.length, name, 0);
        } catch (CorruptRecordException e) {
            return "crc";
        }
        try {
            batch.records();
        } catch (CorruptRecordException e) {
            return "decompress";
        }
        RangeReader.Columns columns = new RangeReader.Columns(schema, "golden", 0);
        try {
            columns.add(batch, Long.MIN_VALUE, Long.MAX_VALUE);
            return "none (" + columns.rows + " records read)";
        } catch (CorruptRecordException e) {
            return "records";
        } finally {
            columns.close();
        }
    }
}
