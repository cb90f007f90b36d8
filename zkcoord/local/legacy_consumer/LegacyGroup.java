// N members of one legacy consumer group in one JVM: each is Kafka 1.1.1's
// old high-level consumer (ZookeeperConsumerConnector), which registers under
// /consumers/<group>/ids, rebalances through ZooKeeper, claims partitions as
// /consumers/<group>/owners/<topic>/<p> and commits offsets to
// /consumers/<group>/offsets/<topic>/<p>. Everything it does is printed to
// stdout as JSON lines (zkcoord/local/legacy.py reads them):
//   {"ts":ms,"member":"m1","event":"joining"}                        before the connector registers
//   {"ts":ms,"member":"m1","event":"started"}                        its stream exists
//   {"ts":ms,"member":"m1","event":"claim","partitions":[0,3]}    ownership written, fetchers starting
//   {"ts":ms,"member":"m1","event":"release","partitions":[0,3]}  before its owner znodes go
//   {"ts":ms,"member":"m1","event":"consumed","partition":0,"offset":41}
//   {"ts":ms,"member":"m1","event":"commit","offsets":{"0":42}}    next offsets, as written to ZooKeeper
//   {"ts":ms,"member":"m1","event":"error","error":"..."}
// Arguments: zookeeper group topic members member-prefix commit-interval-ms
// log-records(true|false) [key=value consumer properties...]. Two keys are
// the driver's, not the consumer's: zkcoord.streams=N (streams per member,
// default 1; each has a thread of its own) and zkcoord.whitelist=REGEX
// (subscribe with a Whitelist instead of the topic; events still name the
// partitions of the topic argument). SIGTERM shuts every connector down
// (their ephemeral znodes go at once).
import java.util.*;
import java.util.concurrent.*;
import kafka.consumer.*;
import kafka.javaapi.consumer.ConsumerConnector;
import kafka.javaapi.consumer.ConsumerRebalanceListener;
import kafka.message.MessageAndMetadata;

public class LegacyGroup {
    static volatile boolean stopping = false;

    static synchronized void emit(String member, String event, String rest) {
        System.out.println("{\"ts\":" + System.currentTimeMillis() + ",\"member\":\"" + member + "\",\"event\":\""
                + event + "\"" + rest + "}");
        System.out.flush();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static String list(Collection<Integer> partitions) {
        List<Integer> sorted = new ArrayList<>(partitions);
        Collections.sort(sorted);
        return sorted.toString().replace(" ", "");
    }

    // Kafka 1.1.1 declares Set<Integer> values but passes Scala sets (a cast
    // to java.util.Set throws ClassCastException and fails the rebalance).
    static List<Integer> partitions(Object owned) {
        List<Integer> result = new ArrayList<>();
        if (owned instanceof Collection) {
            for (Object p : (Collection<?>) owned) result.add(((Number) p).intValue());
        } else if (owned instanceof scala.collection.Iterable) {
            scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) owned).iterator();
            while (it.hasNext()) result.add(((Number) it.next()).intValue());
        }
        return result;
    }

    public static void main(String[] args) throws Exception {
        String zookeeper = args[0], group = args[1], topic = args[2];
        int members = Integer.parseInt(args[3]);
        String prefix = args[4];
        long commitIntervalMs = Long.parseLong(args[5]);
        boolean logRecords = Boolean.parseBoolean(args[6]);
        List<ConsumerConnector> connectors = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            for (ConsumerConnector c : connectors) c.shutdown();
            done.countDown();
        }));
        for (int i = 1; i <= members; i++) {
            String member = prefix + i;
            Properties props = new Properties();
            props.put("zookeeper.connect", zookeeper);
            props.put("group.id", group);
            props.put("consumer.id", member);
            props.put("auto.offset.reset", "smallest");
            props.put("auto.commit.enable", "false");
            props.put("consumer.timeout.ms", "200");
            for (int a = 7; a < args.length; a++) {
                String[] kv = args[a].split("=", 2);
                props.put(kv[0], kv[1]);
            }
            int streams = Integer.parseInt((String) props.getOrDefault("zkcoord.streams", "1"));
            String whitelist = (String) props.remove("zkcoord.whitelist");
            props.remove("zkcoord.streams");
            new Thread(() -> runMember(member, group, topic, props, commitIntervalMs, logRecords, connectors,
                                       streams, whitelist),
                       "member-" + member).start();
        }
        done.await();
    }

    static void runMember(String member, String group, String topic, Properties props, long commitIntervalMs,
                          boolean logRecords, List<ConsumerConnector> connectors, int streams, String whitelist) {
        try {
            emit(member, "joining", "");
            ConsumerConnector connector = Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
            connectors.add(connector);
            String consumerId = group + "_" + member;
            Map<Integer, Long> next = new ConcurrentHashMap<>();
            connector.setConsumerRebalanceListener(new ConsumerRebalanceListener() {
                public void beforeReleasingPartitions(Map<String, Set<Integer>> owned) {
                    emit(member, "release", ",\"partitions\":" + list(partitions(((Map) owned).get(topic))));
                    next.clear();
                }
                public void beforeStartingFetchers(String id, Map<String, Map<Integer, ConsumerThreadId>> global) {
                    List<Integer> mine = new ArrayList<>();
                    for (Map.Entry<Integer, ConsumerThreadId> e : global.getOrDefault(topic, Collections.emptyMap()).entrySet()) {
                        if (e.getValue().consumer().equals(consumerId)) mine.add(e.getKey());
                    }
                    emit(member, "claim", ",\"partitions\":" + list(mine));
                }
            });
            List<KafkaStream<byte[], byte[]>> created = whitelist == null
                    ? connector.createMessageStreams(Collections.singletonMap(topic, streams)).get(topic)
                    : connector.createMessageStreamsByFilter(new Whitelist(whitelist), streams);
            emit(member, "started", "");
            for (int s = 1; s < created.size(); s++) {
                KafkaStream<byte[], byte[]> stream = created.get(s);
                new Thread(() -> iterate(member, connector, stream, next, commitIntervalMs, logRecords),
                           "member-" + member + "-stream-" + s).start();
            }
            iterate(member, connector, created.get(0), next, commitIntervalMs, logRecords);
        } catch (Throwable e) {
            if (stopping) emit(member, "stopped", "");
            else emit(member, "error", ",\"error\":" + quote(e.toString()));
        }
    }

    // One stream's records, logged; commits every commitIntervalMs (what every stream of the member consumed).
    static void iterate(String member, ConsumerConnector connector, KafkaStream<byte[], byte[]> stream,
                        Map<Integer, Long> next, long commitIntervalMs, boolean logRecords) {
        try {
            ConsumerIterator<byte[], byte[]> it = stream.iterator();
            long lastCommit = System.currentTimeMillis();
            boolean dirty = false;
            while (true) {
                try {
                    MessageAndMetadata<byte[], byte[]> record = it.next();
                    next.put(record.partition(), record.offset() + 1);
                    dirty = true;
                    if (logRecords) {
                        emit(member, "consumed", ",\"partition\":" + record.partition() + ",\"offset\":" + record.offset());
                    }
                } catch (ConsumerTimeoutException idle) {
                    // no record for consumer.timeout.ms: a chance to commit
                }
                if (dirty && commitIntervalMs >= 0 && System.currentTimeMillis() - lastCommit >= commitIntervalMs) {
                    connector.commitOffsets(true);
                    StringBuilder offsets = new StringBuilder();
                    for (Map.Entry<Integer, Long> e : new TreeMap<>(next).entrySet()) {
                        offsets.append(offsets.length() == 0 ? "" : ",").append("\"").append(e.getKey())
                               .append("\":").append(e.getValue());
                    }
                    emit(member, "commit", ",\"offsets\":{" + offsets + "}");
                    lastCommit = System.currentTimeMillis();
                    dirty = false;
                }
            }
        } catch (Throwable e) {
            if (stopping) emit(member, "stopped", "");
            else emit(member, "error", ",\"error\":" + quote(e.toString()));
        }
    }
}
