package org.txlog.spark;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The JVM reader: a DataSource V2 batch reader of the record view, executing a plan made by
 * txlog's Python planner (option {@code txlog.plan}, see {@link Plan}).
 *
 * <p>It is registered under its own format name, {@value #SHORT_NAME} (META-INF/services in the
 * jar, see txlog/spark/jvm/resources/), beside the Python source's {@code "txlog"}. From PySpark,
 * {@code txlog.spark.read(spark, path, ...)} plans the read and loads this format with the plan
 * (txlog/spark/jvm_reader.py); streaming and the batches/transactions views are the Python
 * source's. Columns are pruned, and filters on partition, topic, offset and timestamp narrow
 * what is read; every filter is still evaluated by Spark afterwards, so a pushed filter only
 * ever saves work, never decides a row.
 */
public final class TxlogJvmSource implements TableProvider, DataSourceRegister {
    /** The option carrying the plan, as JSON. */
    public static final String PLAN_OPTION = "txlog.plan";
    /** The format name: {@code spark.read.format("txlog_jvm")} (txlog/spark/jvm_build.py JVM_FORMAT). */
    public static final String SHORT_NAME = "txlog_jvm";

    @Override
    public String shortName() {
        return SHORT_NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return StructType.fromDDL(Plan.parse(options.get(PLAN_OPTION)).schemaDdl);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new TxlogTable(schema, Plan.parse(properties.get(PLAN_OPTION)));
    }

    static final class TxlogTable implements Table, SupportsRead {
        private final StructType schema;
        private final Plan plan;

        TxlogTable(StructType schema, Plan plan) {
            this.schema = schema;
            this.plan = plan;
        }

        @Override
        public String name() {
            return "txlog";
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new TxlogScan(schema, plan);
        }
    }

    /** Scan builder, scan and batch in one: what is read is the plan narrowed by pruning and filters. */
    static final class TxlogScan implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
            Scan, Batch {
        private final Plan plan;
        private StructType readSchema;
        private Filter[] pushed = new Filter[0];
        private Set<String> topics;  // null: any
        private Set<Integer> partitions;  // null: any
        private long minOffset = Long.MIN_VALUE;
        private long maxOffsetExclusive = Long.MAX_VALUE;
        private long minTimestampMillis = Long.MIN_VALUE;

        TxlogScan(StructType schema, Plan plan) {
            this.plan = plan;
            this.readSchema = schema;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            readSchema = requiredSchema;
        }

        /** Use what narrows the read; return every filter, so Spark still applies each one to the rows. */
        @Override
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> used = new ArrayList<>();
            for (Filter f : filters) {
                if (narrow(f)) {
                    used.add(f);
                }
            }
            pushed = used.toArray(new Filter[0]);
            return filters;
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed;
        }

        private boolean narrow(Filter f) {
            if (f instanceof And) {
                boolean left = narrow(((And) f).left());
                return narrow(((And) f).right()) || left;
            }
            if (f instanceof EqualTo && ((EqualTo) f).value() != null) {
                return equalTo(((EqualTo) f).attribute(), new Object[] {((EqualTo) f).value()});
            }
            if (f instanceof In) {
                return equalTo(((In) f).attribute(), ((In) f).values());
            }
            if (f instanceof GreaterThan) {
                return lowerBound(((GreaterThan) f).attribute(), ((GreaterThan) f).value(), true);
            }
            if (f instanceof GreaterThanOrEqual) {
                return lowerBound(((GreaterThanOrEqual) f).attribute(), ((GreaterThanOrEqual) f).value(), false);
            }
            if (f instanceof LessThan) {
                return upperBound(((LessThan) f).attribute(), ((LessThan) f).value(), false);
            }
            if (f instanceof LessThanOrEqual) {
                return upperBound(((LessThanOrEqual) f).attribute(), ((LessThanOrEqual) f).value(), true);
            }
            return false;
        }

        private boolean equalTo(String attribute, Object[] values) {
            if (attribute.equals("topic")) {
                Set<String> set = new HashSet<>();
                for (Object v : values) {
                    if (v != null) {
                        set.add(v.toString());
                    }
                }
                topics = topics == null ? set : intersect(topics, set);
                return true;
            }
            if (attribute.equals("partition")) {
                Set<Integer> set = new HashSet<>();
                for (Object v : values) {
                    if (v instanceof Integer) {
                        set.add((Integer) v);
                    }
                }
                partitions = partitions == null ? set : intersect(partitions, set);
                return true;
            }
            if (attribute.equals("offset") && values.length == 1 && values[0] instanceof Long) {
                long v = (Long) values[0];
                minOffset = Math.max(minOffset, v);
                maxOffsetExclusive = Math.min(maxOffsetExclusive, v == Long.MAX_VALUE ? v : v + 1);
                return true;
            }
            return false;
        }

        private static <T> Set<T> intersect(Set<T> a, Set<T> b) {
            Set<T> out = new HashSet<>(a);
            out.retainAll(b);
            return out;
        }

        private boolean lowerBound(String attribute, Object value, boolean strict) {
            if (attribute.equals("offset") && value instanceof Long) {
                long v = (Long) value;
                minOffset = Math.max(minOffset, strict && v < Long.MAX_VALUE ? v + 1 : v);
                return true;
            }
            Long millis = attribute.equals("timestamp") ? epochMillisFloor(value) : null;
            if (millis != null) {  // a batch whose largest timestamp is below the bound holds no wanted row
                minTimestampMillis = Math.max(minTimestampMillis, millis);
                return true;
            }
            return false;
        }

        private boolean upperBound(String attribute, Object value, boolean inclusive) {
            if (attribute.equals("offset") && value instanceof Long) {
                long v = (Long) value;
                maxOffsetExclusive = Math.min(maxOffsetExclusive, inclusive && v < Long.MAX_VALUE ? v + 1 : v);
                return true;
            }
            return false;  // record timestamps are not ordered within a partition: no range to cut
        }

        /** A timestamp filter's value in epoch ms, rounded down (the session may use Timestamp or Instant). */
        private static Long epochMillisFloor(Object value) {
            Instant instant = value instanceof Timestamp ? ((Timestamp) value).toInstant()
                            : value instanceof Instant ? (Instant) value : null;
            return instant == null ? null : instant.toEpochMilli();
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return readSchema;
        }

        @Override
        public String description() {
            return "txlog JVM reader: " + plan.ranges.size() + " planned ranges, pushed filters "
                   + java.util.Arrays.toString(pushed);
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        /** The plan's ranges that the pushed filters leave something of, narrowed to them. */
        @Override
        public InputPartition[] planInputPartitions() {
            List<InputPartition> out = new ArrayList<>();
            for (Plan.Range r : plan.ranges) {
                if (topics != null && !topics.contains(r.topic)
                        || partitions != null && !partitions.contains(r.partition)) {
                    continue;
                }
                long start = Math.max(r.start, minOffset);
                long end = Math.min(r.end, maxOffsetExclusive);
                if (start < end) {
                    out.add(new RangePartition(r.narrowed(start, end)));
                }
            }
            return out.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(readSchema, plan.failOnDataLoss, minTimestampMillis);
        }
    }

    /** One planned (and perhaps narrowed) range: the unit of a Spark task. */
    static final class RangePartition implements InputPartition {
        final Plan.Range range;

        RangePartition(Plan.Range range) {
            this.range = range;
        }
    }

    static final class ReaderFactory implements PartitionReaderFactory {
        private final StructType schema;
        private final boolean failOnDataLoss;
        private final long minTimestampMillis;

        ReaderFactory(StructType schema, boolean failOnDataLoss, long minTimestampMillis) {
            this.schema = schema;
            this.failOnDataLoss = failOnDataLoss;
            this.minTimestampMillis = minTimestampMillis;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new RangeReader(((RangePartition) partition).range, schema, failOnDataLoss, minTimestampMillis);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the txlog JVM reader reads columnar batches only");
        }
    }
}
