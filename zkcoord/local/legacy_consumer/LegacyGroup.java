// N members of one legacy consumer group in one JVM: each is Kafka 1.1.1's
// old high-level consumer (ZookeeperConsumerConnector), which registers under
// /consumers/<group>/ids, rebalances through ZooKeeper, claims partitions as
// /consumers/<group>/owners/<topic>/<p> and commits offsets to
// /consumers/<group>/offsets/<topic>/<p>. Everything it does is printed to
// stdout as JSON lines (zkcoord/local/legacy.py reads them):
//   {"ts":ms,"member":"m1","event":"joining"}                        before the connector registers
//   {"ts":ms,"member":"m1","event":"started"}                        its streams exist
//   {"ts":ms,"member":"m1","event":"claim","partitions":[0,3],"topics":{"a":[0,3],"b":[1]}}
//                                                                    ownership written, fetchers starting
//   {"ts":ms,"member":"m1","event":"release","partitions":[0,3],"topics":{"a":[0,3],"b":[1]}}
//                                                                    before its owner znodes go
//   {"ts":ms,"member":"m1","event":"consumed","topic":"a","partition":0,"offset":41,"thread":"0"}
//   {"ts":ms,"member":"m1","event":"commit","offsets":{"0":42},"topics":{"a":{"0":42},"b":{"1":7}}}
//                                                                    next offsets, as written to ZooKeeper
//   {"ts":ms,"member":"m1","event":"stopped"}                        its connector shut down (znodes gone);
//                                                                    a release of what it held comes before the shutdown
//   {"ts":ms,"member":"m1","event":"error","error":"..."}
// "topics" names every topic the member claims, releases or committed
// (whatever it subscribed: the topic argument, zkcoord.topics, a whitelist);
// "partitions" and "offsets" are the topic argument's alone (what the first
// users of this driver read).
// Arguments: zookeeper group topic members member-prefix commit-interval-ms
// log-records(true|false) [key=value consumer properties...]. These keys are
// the driver's, not the consumer's:
//   zkcoord.streams=N        streams per member (default 1; each has a thread of its own)
//   zkcoord.whitelist=REGEX  subscribe with a Whitelist instead of the topics
//   zkcoord.topics=A,B       more topics subscribed beside the topic argument, with as many streams
//   zkcoord.record.log=PATH  append one line per record consumed to PATH, tab-separated:
//                            topic partition offset member thread wall-ms (thread: the stream's
//                            index in the member, 0..streams-1); written through a buffer flushed
//                            every 100 ms, before each of the driver's commits and at shutdown
//                            (a SIGKILL loses at most the last 100 ms of lines)
// Standard input, one command a line: "stop NAME" shuts member NAME down as
// SIGTERM does every member (with auto.commit.enable its consumed offsets are
// committed; its ephemeral znodes go at once). End of input changes nothing.
// SIGTERM shuts every connector down, all at once.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import kafka.consumer.*;
import kafka.javaapi.consumer.ConsumerConnector;
import kafka.javaapi.consumer.ConsumerRebalanceListener;
import kafka.message.MessageAndMetadata;

public class LegacyGroup {
    static final Map<String, Member> MEMBERS = new ConcurrentHashMap<>();
    static final Object RECORDS_LOCK = new Object();
    static Writer records;  // the record log, or null

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

    // {"a":[0,3],"b":[1]}, topics in name order
    static String byTopic(Map<String, List<Integer>> partitions) {
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<String, List<Integer>> e : new TreeMap<>(partitions).entrySet()) {
            json.append(json.length() == 1 ? "" : ",").append(quote(e.getKey())).append(":").append(list(e.getValue()));
        }
        return json.append("}").toString();
    }

    // {"0":42,"1":7}, partitions in order
    static String offsets(Map<Integer, Long> next) {
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<Integer, Long> e : new TreeMap<>(next).entrySet()) {
            json.append(json.length() == 1 ? "" : ",").append("\"").append(e.getKey()).append("\":").append(e.getValue());
        }
        return json.append("}").toString();
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

    static void record(String topic, int partition, long offset, String member, int stream) throws IOException {
        if (records == null) return;
        String line = topic + "\t" + partition + "\t" + offset + "\t" + member + "\t" + stream + "\t"
                + System.currentTimeMillis() + "\n";
        synchronized (RECORDS_LOCK) {
            records.write(line);
        }
    }

    static void flushRecords() {
        if (records == null) return;
        synchronized (RECORDS_LOCK) {
            try {
                records.flush();
            } catch (IOException e) {
                emit("-", "error", ",\"error\":" + quote("record log: " + e));
            }
        }
    }

    /** One member: its connector once created, its stream threads, whether it is being stopped. */
    static final class Member {
        final String name;
        volatile boolean stopping = false;
        volatile ConsumerConnector connector;
        final List<Thread> threads = new CopyOnWriteArrayList<>();
        volatile Map<String, List<Integer>> holding = Collections.emptyMap();  // its last claim, until a release
        String topic;
        boolean stopped = false;

        Member(String name) {
            this.name = name;
        }

        // Say what it held, shut the connector down (it commits with auto-commit, its ZooKeeper session
        // and znodes go), let its streams' threads log what they were handed, then say so. Idempotent.
        // The release comes first: its znodes go during the shutdown, and no listener call says so.
        synchronized void stop() {
            stopping = true;
            if (stopped) return;
            stopped = true;
            Map<String, List<Integer>> held = holding;
            if (!held.isEmpty()) {
                holding = Collections.emptyMap();
                emit(name, "release", ",\"partitions\":" + list(held.getOrDefault(topic, Collections.emptyList()))
                        + ",\"topics\":" + byTopic(held));
            }
            ConsumerConnector c = connector;
            if (c != null) c.shutdown();
            for (Thread t : threads) {
                try {
                    t.join(5000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            flushRecords();
            emit(name, "stopped", "");
        }
    }

    public static void main(String[] args) throws Exception {
        String zookeeper = args[0], group = args[1], topic = args[2];
        int members = Integer.parseInt(args[3]);
        String prefix = args[4];
        long commitIntervalMs = Long.parseLong(args[5]);
        boolean logRecords = Boolean.parseBoolean(args[6]);
        Properties base = new Properties();
        for (int a = 7; a < args.length; a++) {
            String[] kv = args[a].split("=", 2);
            base.put(kv[0], kv[1]);
        }
        int streams = Integer.parseInt((String) base.getOrDefault("zkcoord.streams", "1"));
        String whitelist = (String) base.remove("zkcoord.whitelist");
        Map<String, Integer> counts = new LinkedHashMap<>();
        counts.put(topic, streams);
        String more = (String) base.remove("zkcoord.topics");
        if (more != null) {
            for (String t : more.split(",")) if (!t.isEmpty()) counts.put(t, streams);
        }
        String recordLog = (String) base.remove("zkcoord.record.log");
        base.remove("zkcoord.streams");
        if (recordLog != null) {
            records = new BufferedWriter(new OutputStreamWriter(new FileOutputStream(recordLog, true),
                                                                StandardCharsets.UTF_8), 1 << 16);
            Thread flusher = new Thread(() -> {
                while (true) {
                    try {
                        Thread.sleep(100);
                    } catch (InterruptedException e) {
                        return;
                    }
                    flushRecords();
                }
            }, "record-log-flusher");
            flusher.setDaemon(true);
            flusher.start();
        }
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // every member at once, as separate processes would
            List<Thread> stops = new ArrayList<>();
            for (Member m : MEMBERS.values()) stops.add(new Thread(m::stop, "stop-" + m.name));
            for (Thread t : stops) t.start();
            for (Thread t : stops) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            flushRecords();
            done.countDown();
        }));
        for (int i = 1; i <= members; i++) {
            Member member = new Member(prefix + i);
            member.topic = topic;
            MEMBERS.put(member.name, member);
            Properties props = new Properties();
            props.put("zookeeper.connect", zookeeper);
            props.put("group.id", group);
            props.put("consumer.id", member.name);
            props.put("auto.offset.reset", "smallest");
            props.put("auto.commit.enable", "false");
            props.put("consumer.timeout.ms", "200");
            props.putAll(base);
            new Thread(() -> runMember(member, group, topic, counts, props, commitIntervalMs, logRecords, whitelist),
                       "member-" + member.name).start();
        }
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = commands.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            Member member = words.length == 2 && words[0].equals("stop") ? MEMBERS.get(words[1]) : null;
            if (member != null) {
                new Thread(member::stop, "stop-" + member.name).start();
            } else if (!line.trim().isEmpty()) {
                emit("-", "error", ",\"error\":" + quote("unknown command (want: stop MEMBER): " + line.trim()));
            }
        }
        done.await();
    }

    static void runMember(Member member, String group, String topic, Map<String, Integer> counts, Properties props,
                          long commitIntervalMs, boolean logRecords, String whitelist) {
        String name = member.name;
        try {
            emit(name, "joining", "");
            ConsumerConnector connector = Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
            member.connector = connector;
            if (member.stopping) {  // stopped while it was registering: the stop did not see the connector
                connector.shutdown();
                return;
            }
            String consumerId = group + "_" + name;
            Map<String, Map<Integer, Long>> next = new ConcurrentHashMap<>();
            connector.setConsumerRebalanceListener(new ConsumerRebalanceListener() {
                public void beforeReleasingPartitions(Map<String, Set<Integer>> owned) {
                    Map<String, List<Integer>> mine = new TreeMap<>();
                    for (Map.Entry<?, ?> e : ((Map<?, ?>) owned).entrySet()) {
                        mine.put((String) e.getKey(), partitions(e.getValue()));
                    }
                    member.holding = Collections.emptyMap();
                    emit(name, "release", ",\"partitions\":" + list(mine.getOrDefault(topic, Collections.emptyList()))
                            + ",\"topics\":" + byTopic(mine));
                    next.clear();
                }
                public void beforeStartingFetchers(String id, Map<String, Map<Integer, ConsumerThreadId>> global) {
                    Map<String, List<Integer>> mine = new TreeMap<>();
                    for (Map.Entry<String, Map<Integer, ConsumerThreadId>> t : global.entrySet()) {
                        for (Map.Entry<Integer, ConsumerThreadId> e : t.getValue().entrySet()) {
                            if (e.getValue().consumer().equals(consumerId)) {
                                mine.computeIfAbsent(t.getKey(), k -> new ArrayList<>()).add(e.getKey());
                            }
                        }
                    }
                    member.holding = mine;
                    emit(name, "claim", ",\"partitions\":" + list(mine.getOrDefault(topic, Collections.emptyList()))
                            + ",\"topics\":" + byTopic(mine));
                }
            });
            List<KafkaStream<byte[], byte[]>> created = new ArrayList<>();
            if (whitelist == null) {
                for (List<KafkaStream<byte[], byte[]>> perTopic : connector.createMessageStreams(counts).values()) {
                    created.addAll(perTopic);
                }
            } else {
                created.addAll(connector.createMessageStreamsByFilter(new Whitelist(whitelist), counts.get(topic)));
            }
            emit(name, "started", "");
            // Stream s is logged as thread s % streams: a member's streams of one topic are numbered 0..streams-1.
            int streams = counts.get(topic);
            for (int s = 0; s < created.size(); s++) {
                KafkaStream<byte[], byte[]> stream = created.get(s);
                int thread = s % streams;
                Thread t = new Thread(() -> iterate(member, topic, connector, stream, thread, next, commitIntervalMs,
                                                    logRecords),
                                      "member-" + name + "-stream-" + s);
                member.threads.add(t);
                t.start();
            }
        } catch (Throwable e) {
            if (!member.stopping) emit(name, "error", ",\"error\":" + quote(e.toString()));
        }
    }

    // One stream's records, logged; commits every commitIntervalMs (what every stream of the member consumed).
    static void iterate(Member member, String topic, ConsumerConnector connector, KafkaStream<byte[], byte[]> stream,
                        int thread, Map<String, Map<Integer, Long>> next, long commitIntervalMs, boolean logRecords) {
        String name = member.name;
        try {
            ConsumerIterator<byte[], byte[]> it = stream.iterator();
            long lastCommit = System.currentTimeMillis();
            boolean dirty = false;
            while (true) {
                try {
                    MessageAndMetadata<byte[], byte[]> record = it.next();
                    record(record.topic(), record.partition(), record.offset(), name, thread);
                    next.computeIfAbsent(record.topic(), k -> new ConcurrentHashMap<>())
                        .put(record.partition(), record.offset() + 1);
                    dirty = true;
                    if (logRecords) {
                        emit(name, "consumed", ",\"topic\":" + quote(record.topic()) + ",\"partition\":"
                                + record.partition() + ",\"offset\":" + record.offset() + ",\"thread\":\"" + thread + "\"");
                    }
                } catch (ConsumerTimeoutException idle) {
                    // no record for consumer.timeout.ms: a chance to commit
                }
                if (dirty && commitIntervalMs >= 0 && System.currentTimeMillis() - lastCommit >= commitIntervalMs) {
                    flushRecords();  // a committed record is in the log
                    connector.commitOffsets(true);
                    StringBuilder topics = new StringBuilder("{");
                    for (Map.Entry<String, Map<Integer, Long>> e : new TreeMap<>(next).entrySet()) {
                        topics.append(topics.length() == 1 ? "" : ",").append(quote(e.getKey())).append(":")
                              .append(offsets(e.getValue()));
                    }
                    emit(name, "commit", ",\"offsets\":" + offsets(next.getOrDefault(topic, Collections.emptyMap()))
                            + ",\"topics\":" + topics + "}");
                    lastCommit = System.currentTimeMillis();
                    dirty = false;
                }
            }
        } catch (Throwable e) {
            if (!member.stopping) emit(name, "error", ",\"error\":" + quote(e.toString()));
        }
    }
}
