// A long-running Kafka consumer (kafka-clients 4.x) that reports, as one JSON line each on stdout,
// every assignment change its ConsumerRebalanceListener sees and every record it consumes, so a
// test can check from the clients' own callbacks that no partition had two owners at once.
//
//   java -cp <classes>:<kafka 4.x jars> AssignmentReporter <consumer.properties> <topic>[,<topic>...]
//
// The properties file is the consumer's configuration (bootstrap.servers, group.id, group.protocol,
// group.remote.assignor, ...; String deserializers are set here). Lines (ts: epoch ms, taken when
// the event happens; member_id and epoch: consumer.groupMetadata() at that moment):
//   {"event":"started","ts":..,"client_id":".."}
//   {"event":"assigned"|"revoked"|"lost","ts":..,"member_id":"..","epoch":N,"partitions":[["t",0],..]}
//   {"event":"record","ts":..,"member_id":"..","topic":"t","partition":0,"offset":5,"key":..,"value":..}
//   {"event":"committed","ts":..,"member_id":"..","offsets":[["t",0,6],..],"error":null|".."}
//   {"event":"error","ts":..,"member_id":"..","error":"<exception class>: <message>"}  (then it exits 1)
//   {"event":"stopped","ts":..}
// Unless enable.auto.commit=true it commits synchronously after each batch of records. SIGTERM:
// the consumer is woken, closes (leaving its group) and prints "stopped"; the JVM exits 0.
// VerifiableConsumer (kafka-tools) prints no member id and reports lost partitions as revoked;
// hence this class.

import java.io.FileInputStream;
import java.io.InputStream;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class AssignmentReporter implements ConsumerRebalanceListener {
    private final KafkaConsumer<String, String> consumer;
    private final boolean manualCommit;
    private volatile boolean stopping = false;

    AssignmentReporter(Properties props) {
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        manualCommit = !"true".equalsIgnoreCase(props.getProperty("enable.auto.commit", "false"));
        props.put("enable.auto.commit", manualCommit ? "false" : "true");
        consumer = new KafkaConsumer<>(props);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: AssignmentReporter <consumer.properties> <topic>[,<topic>...]");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        String clientId = props.getProperty("client.id", "");
        AssignmentReporter reporter = new AssignmentReporter(props);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            reporter.stopping = true;
            try {
                reporter.consumer.wakeup();
            } catch (Exception e) {
                // closed already (it exited by itself)
            }
            try {
                closed.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        print("{\"event\":\"started\",\"ts\":" + System.currentTimeMillis() + ",\"client_id\":" + str(clientId) + "}");
        int status = 0;
        try {
            reporter.run(Arrays.asList(args[1].split(",")));
        } catch (WakeupException e) {
            // SIGTERM: close below
        } catch (Exception e) {
            reporter.event("error", "\"error\":" + str(e.getClass().getName() + ": " + e.getMessage()));
            status = 1;
        } finally {
            try {
                reporter.consumer.close();
            } catch (Exception e) {
                reporter.event("error", "\"error\":" + str("close: " + e.getClass().getName() + ": " + e.getMessage()));
            }
            print("{\"event\":\"stopped\",\"ts\":" + System.currentTimeMillis() + "}");
            closed.countDown();
        }
        if (status != 0) {
            System.exit(status);  // not from the shutdown hook's path: it waits for `closed` only
        }
    }

    void run(Collection<String> topics) {
        consumer.subscribe(topics, this);
        while (!stopping) {
            ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            for (ConsumerRecord<String, String> r : records) {
                event("record", "\"topic\":" + str(r.topic()) + ",\"partition\":" + r.partition()
                        + ",\"offset\":" + r.offset() + ",\"key\":" + str(r.key()) + ",\"value\":" + str(r.value()));
                next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            if (manualCommit && !next.isEmpty()) {
                String error = null;
                try {
                    consumer.commitSync(next);
                } catch (WakeupException e) {
                    throw e;
                } catch (Exception e) {
                    error = e.getClass().getName() + ": " + e.getMessage();
                }
                StringBuilder offsets = new StringBuilder();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                    offsets.append(offsets.length() == 0 ? "" : ",").append("[").append(str(e.getKey().topic()))
                            .append(",").append(e.getKey().partition()).append(",").append(e.getValue().offset())
                            .append("]");
                }
                event("committed", "\"offsets\":[" + offsets + "],\"error\":" + str(error));
            }
        }
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        change("assigned", partitions);
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        change("revoked", partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        change("lost", partitions);
    }

    private void change(String name, Collection<TopicPartition> partitions) {
        StringBuilder list = new StringBuilder();
        for (TopicPartition tp : partitions) {
            list.append(list.length() == 0 ? "" : ",").append("[").append(str(tp.topic())).append(",")
                    .append(tp.partition()).append("]");
        }
        event(name, "\"epoch\":" + consumer.groupMetadata().generationId() + ",\"partitions\":[" + list + "]");
    }

    private void event(String name, String fields) {
        long ts = System.currentTimeMillis();
        String memberId;
        try {
            memberId = consumer.groupMetadata().memberId();
        } catch (Exception e) {
            memberId = null;
        }
        print("{\"event\":" + str(name) + ",\"ts\":" + ts + ",\"member_id\":" + str(memberId) + "," + fields + "}");
    }

    private static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }
}
