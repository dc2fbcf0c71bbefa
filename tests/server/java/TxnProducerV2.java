// The Java 4.x producer against `txlog serve` (tests/server/test_transactions.py): it negotiates
// transaction protocol v2 (KIP-890: no AddPartitionsToTxn, Produce v12, EndTxn v5 bumping the
// epoch), commits, aborts, commits, and is then fenced by a second instance of its transactional id.
// Prints one line per step; exits non-zero on any unexpected outcome.

import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducerV2 {
    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        return new KafkaProducer<>(props);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], transactionalId = args[2];
        KafkaProducer<String, String> first = producer(bootstrap, transactionalId);
        first.initTransactions();
        String[][] steps = {{"j1", "commit"}, {"j2", "abort"}, {"j3", "commit"}};
        for (String[] step : steps) {
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, step[0])).get();
            if (step[1].equals("commit")) first.commitTransaction(); else first.abortTransaction();
            System.out.println(step[1] + " " + step[0]);
        }
        KafkaProducer<String, String> second = producer(bootstrap, transactionalId);
        second.initTransactions();
        System.out.println("second instance initialised");
        boolean fenced = false;
        try {
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
            first.commitTransaction();
        } catch (ProducerFencedException e) {
            fenced = true;
        } catch (ExecutionException e) {
            fenced = e.getCause() instanceof ProducerFencedException;
        } catch (KafkaException e) {
            fenced = e.getCause() instanceof ProducerFencedException;
        }
        System.out.println(fenced ? "first instance fenced" : "first instance NOT fenced");
        first.close();
        second.close();
        System.exit(fenced ? 0 : 1);
    }
}
