package org.txlog.spark;

import com.github.luben.zstd.ZstdInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

/**
 * The header of one magic-2 record batch at a position of a mapped segment, CRC-checked.
 *
 * <p>The layout is docs/kafka-formats.md §1 (the 61-byte header) and §2 (records); every
 * length read from the file is bounds-checked against the planned extent before use, and an
 * error names the file and the batch's byte position, as storage/records.py's do.
 */
final class LogBatch {
    static final int HEADER_SIZE = 61;
    /** From attributes on: the bytes the CRC-32C covers (docs/kafka-formats.md §1). */
    private static final int CRC_COVERED_START = 21;
    private static final int COMPRESSION_MASK = 0x07;
    private static final int TIMESTAMP_TYPE_MASK = 0x08;
    private static final int TRANSACTIONAL_MASK = 0x10;
    private static final int CONTROL_MASK = 0x20;

    final String file;
    final long position;
    final long baseOffset;
    final int size;
    final int attributes;
    final int lastOffsetDelta;
    final long baseTimestamp;
    final long maxTimestamp;
    final long producerId;
    final short producerEpoch;
    final int baseSequence;
    final int recordsCount;
    private final ByteBuffer buf;
    private final int at;

    /**
     * Parse and CRC-check the batch at {@code buf[at]}, which must end by {@code limit}
     * (everything inside a planned extent was whole when planned: a short batch is corruption).
     */
    LogBatch(ByteBuffer buf, int at, int limit, String file, long filePosition) {
        this(buf, at, limit, file, filePosition, true);
    }

    /**
     * As above, with the CRC check only when {@code verifyCrc}: the golden corpus's check
     * (txlog/spark/jvm/test/) tells a damaged frame from a damaged CRC this way.
     */
    LogBatch(ByteBuffer buf, int at, int limit, String file, long filePosition, boolean verifyCrc) {
        this.buf = buf;
        this.at = at;
        this.file = file;
        this.position = filePosition;
        if (limit - at < HEADER_SIZE) {
            throw corrupt("the extent ends " + (limit - at) + " bytes into a batch header");
        }
        baseOffset = buf.getLong(at);
        int batchLength = buf.getInt(at + 8);
        byte magic = buf.get(at + 16);
        if (magic != 2) {
            throw corrupt("unsupported magic " + magic + " (only 2 is supported)");
        }
        if (batchLength < HEADER_SIZE - 12 || batchLength > limit - at - 12) {
            throw corrupt("batch length " + batchLength + " does not fit the " + (limit - at)
                          + " bytes left in the extent");
        }
        size = batchLength + 12;
        long crc = buf.getInt(at + 17) & 0xffffffffL;
        if (verifyCrc) {
            CRC32C check = new CRC32C();
            check.update(buf.duplicate().position(at + CRC_COVERED_START).limit(at + size));
            if (check.getValue() != crc) {
                throw corrupt(String.format("CRC-32C mismatch (stored %08x, computed %08x)", crc, check.getValue()));
            }
        }
        attributes = buf.getShort(at + 21);
        lastOffsetDelta = buf.getInt(at + 23);
        baseTimestamp = buf.getLong(at + 27);
        maxTimestamp = buf.getLong(at + 35);
        producerId = buf.getLong(at + 43);
        producerEpoch = buf.getShort(at + 51);
        baseSequence = buf.getInt(at + 53);
        recordsCount = buf.getInt(at + 57);
    }

    long lastOffset() {
        return baseOffset + lastOffsetDelta;
    }

    boolean isControl() {
        return (attributes & CONTROL_MASK) != 0;
    }

    boolean isTransactional() {
        return (attributes & TRANSACTIONAL_MASK) != 0;
    }

    boolean isLogAppendTime() {
        return (attributes & TIMESTAMP_TYPE_MASK) != 0;
    }

    /**
     * The most a records region of {@code compressedLength} bytes may inflate to: 64 times its
     * size, at least 64 MiB, at most what an int counts (docs/kafka-formats.md §1.4, the rule of
     * storage/native/src/compression.rs's {@code inflation_limit}, which every txlog reader and
     * the append path apply).
     */
    static long inflationLimit(int compressedLength) {
        return Math.min(Integer.MAX_VALUE, Math.max(64L << 20, 64L * compressedLength));
    }

    /**
     * The records region, decompressed (gzip by java.util.zip, the rest by the codecs Spark
     * bundles), read incrementally and refused one byte past its inflation limit: a small
     * hostile batch cannot make an executor allocate gigabytes.
     */
    byte[] records() {
        byte[] raw = new byte[size - HEADER_SIZE];
        buf.get(at + HEADER_SIZE, raw);
        int codec = attributes & COMPRESSION_MASK;
        if (codec == 0) {
            return raw;
        }
        long limit = inflationLimit(raw.length);
        // readNBytes grows its buffer as bytes arrive: it never allocates what a stream claims
        int most = (int) Math.min(limit + 1, Integer.MAX_VALUE - 8);  // the largest Java array
        byte[] inflated;
        try (InputStream in = decompressing(codec, new ByteArrayInputStream(raw))) {
            inflated = in.readNBytes(most);
        } catch (IOException | RuntimeException e) {
            throw corrupt("records region does not decompress (" + codecName(codec) + "): " + e.getMessage());
        }
        if (inflated.length == most) {
            throw corrupt(codecName(codec) + " records region of " + raw.length + " bytes inflates past "
                          + limit + " bytes, the most a batch of its size may hold");
        }
        return inflated;
    }

    private InputStream decompressing(int codec, InputStream in) throws IOException {
        switch (codec) {
            case 1: return new GZIPInputStream(in);
            case 2: return new SnappyInputStream(in);  // Kafka writes snappy-java's (xerial) framing
            case 3: return new LZ4FrameInputStream(in);
            case 4: return new ZstdInputStream(in);
            default: throw corrupt("unknown compression codec " + codec);
        }
    }

    private static String codecName(int codec) {
        return new String[] {"none", "gzip", "snappy", "lz4", "zstd"}[Math.min(codec, 4)];
    }

    CorruptRecordException corrupt(String detail) {
        return new CorruptRecordException(file, position,
            "batch" + (buf.limit() - at >= 8 ? " with base offset " + buf.getLong(at) : "") + ": " + detail);
    }
}
