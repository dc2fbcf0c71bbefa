import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's part of the broker-written dataset (tests/kafka_rig/broker_data.py).
 *
 * Kafka 4.4's producer negotiates transactions protocol v2 with a 4.4 broker, so the transactions
 * here are TV2 (epoch bumped at every end of transaction, markers written by the coordinator
 * without a separate AddPartitions round trip). The consumer uses the KIP-848 protocol
 * (group.protocol=consumer), so __consumer_offsets gets the new group record types.
 *
 * Usage: BrokerDataWriter BOOTSTRAP TXN_TOPIC OUT_TOPIC IDEMPOTENT_TOPIC
 * The topics exist already (made by the Python side); this program only writes and commits.
 */
public final class BrokerDataWriter {
    private static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};

    private BrokerDataWriter() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String txnTopic = args[1];
        String outTopic = args[2];
        String idempotentTopic = args[3];
        for (String codec : CODECS) {
            transactions(bootstrap, txnTopic, codec);
        }
        idempotent(bootstrap, idempotentTopic);
        consumeTransformProduce(bootstrap, txnTopic, outTopic);
    }

    private static Properties producerProps(String bootstrap, String codec) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        return p;
    }

    private static byte[] bytes(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    /** Records with headers, a null key, a null value and an empty value, in both partitions. */
    private static List<ProducerRecord<byte[], byte[]>> records(String topic, String tag) {
        List<ProducerRecord<byte[], byte[]>> out = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            int partition = i % 2;
            byte[] key = i == 1 ? null : bytes(tag + "-k" + i);
            byte[] value = i == 2 ? null : i == 3 ? new byte[0] : bytes(tag + "-v" + i + "-" + "x".repeat(40 * i));
            ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, key, value);
            if (i % 3 == 0) {
                r.headers().add(new RecordHeader("h" + i, bytes("hv" + i)));
                r.headers().add(new RecordHeader("empty", new byte[0]));
                r.headers().add(new RecordHeader("nullvalue", null));
            }
            out.add(r);
        }
        return out;
    }

    /** One committed and one aborted transaction with this codec (a fresh transactional id each). */
    private static void transactions(String bootstrap, String topic, String codec) throws Exception {
        Properties p = producerProps(bootstrap, codec);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-txn-" + codec);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (ProducerRecord<byte[], byte[]> r : records(topic, "java-" + codec + "-committed")) {
                producer.send(r);
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (ProducerRecord<byte[], byte[]> r : records(topic, "java-" + codec + "-aborted")) {
                producer.send(r);
            }
            producer.flush();
            producer.abortTransaction();
        }
    }

    /** An idempotent, non-transactional producer: sequence numbers without markers. */
    private static void idempotent(String bootstrap, String topic) throws Exception {
        Properties p = producerProps(bootstrap, "lz4");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int round = 0; round < 3; round++) {
                for (ProducerRecord<byte[], byte[]> r : records(topic, "java-idempotent-" + round)) {
                    producer.send(r);
                }
                producer.flush();
            }
        }
    }

    /**
     * Read the committed input with a KIP-848 consumer (group.protocol=consumer), write a copy in a
     * transaction with sendOffsetsToTransaction (a transactional offset commit), and commit the
     * group's offsets once more outside a transaction (a plain KIP-848 commit).
     */
    private static void consumeTransformProduce(String bootstrap, String inTopic, String outTopic) throws Exception {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "java-kip848-group");
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties p = producerProps(bootstrap, "zstd");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-ctp");
        int expected = CODECS.length * 6;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(inTopic));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 120_000;
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            while (seen < expected) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read " + seen + " of " + expected + " committed records");
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    ProducerRecord<byte[], byte[]> copy =
                            new ProducerRecord<>(outTopic, r.partition(), r.key(), r.value(), r.headers());
                    producer.send(copy);
                    positions.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1, "ctp"));
                    seen++;
                }
                producer.sendOffsetsToTransaction(new HashMap<>(positions), consumer.groupMetadata());
                producer.commitTransaction();
            }
            consumer.commitSync(positions);
        }
    }
}
