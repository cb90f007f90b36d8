// Many of Kafka's own VerifiableConsumers (kafka-tools 4.x, the consumer of Kafka's system tests) in
// one JVM, started and stopped on command, so a test pays for one JVM start instead of one per member
// and per restart. Each member is a VerifiableConsumer exactly as its main() builds one (its own
// KafkaConsumer, String deserializers, synchronous commits after each batch), printing its usual JSON
// events into a stream of its own, which this class prefixes with the member's label and the time.
//
//   java -cp <classes>:<kafka 4.x jars> ConsumerHost
//
// Commands on stdin, one a line, fields separated by tabs:
//   start <label> <consumer.properties> <topic>   a new member (the file: bootstrap.servers, group.id,
//                                                 group.protocol, ...; read at once, may be deleted then)
//   stop <label>                                  VerifiableConsumer.close() in a thread of its own
//                                                 (several members may be closing at once): it closes
//                                                 its consumer, which leaves the group; answered by
//                                                 "stopped"
//   tool <id> <main class> [<arg>...]             run a command-line tool's main() here (e.g.
//                                                 ConsumerGroupCommand), its System.out and System.err
//                                                 captured, Kafka's Exit.exit turned into a return;
//                                                 answered by "tool" with its exit code and output
//   exit, or the end of stdin                     every member stopped (at once), then the JVM exits 0
// Output, one JSON object a line (mono_ns: System.nanoTime(), CLOCK_MONOTONIC on Linux: the clock of
// Python's time.monotonic_ns(), so events of this JVM and of Python clients share one time line):
//   {"member":"<label>","mono_ns":N,"event":<VerifiableConsumer's event, e.g. partitions_assigned>}
//   {"host":"started"|"stopped","member":"<label>","mono_ns":N}
//   {"host":"error","member":"<label>"|null,"error":"..."}
//   {"host":"tool","id":"<id>","exit":N,"stdout":"...","stderr":"..."}
//   {"host":"ready"} once, first; {"host":"exit"} last.
// The property zkcoord.revoke.delay.ms (taken out of the consumer's settings) makes the member's
// onPartitionsRevoked wait that long before VerifiableConsumer prints partitions_revoked and returns
// (an application that needs time to give partitions up); it prints a "revocation_started" event
// (with the partitions) when the callback begins. The partitions_revoked event is printed just
// before the callback returns: the member holds its partitions until then.

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.lang.reflect.InvocationTargetException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.internals.Exit;
import org.apache.kafka.tools.VerifiableConsumer;

public class ConsumerHost {
    static final String REVOKE_DELAY = "zkcoord.revoke.delay.ms";
    static final int CLOSE_TIMEOUT_MS = 30000;  // VerifiableConsumer's default
    private static final Object OUT = new Object();
    private static final PrintStream STDOUT = System.out;  // ours: a tool's System.out is swapped while it runs
    private final Map<String, Member> members = new LinkedHashMap<>();

    /** One member: its VerifiableConsumer and the thread running it. */
    static final class Member {
        final String label;
        final VerifiableConsumer consumer;
        final Thread thread;
        final java.util.concurrent.atomic.AtomicBoolean stopping = new java.util.concurrent.atomic.AtomicBoolean();

        Member(String label, VerifiableConsumer consumer) {
            this.label = label;
            this.consumer = consumer;
            this.thread = new Thread(consumer::run, "member-" + label);
        }
    }

    /** VerifiableConsumer whose revocation callback may take a while (see the header). */
    static final class SlowRevoker extends VerifiableConsumer {
        private final long delayMs;
        private final PrintStream out;

        SlowRevoker(KafkaConsumer<String, String> consumer, PrintStream out, String topic, long delayMs) {
            super(consumer, out, topic, -1, false, false, false, CLOSE_TIMEOUT_MS);
            this.delayMs = delayMs;
            this.out = out;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (delayMs > 0 && !partitions.isEmpty()) {
                StringBuilder list = new StringBuilder();
                for (TopicPartition tp : partitions) {
                    list.append(list.length() == 0 ? "" : ",").append("{\"topic\":").append(str(tp.topic()))
                            .append(",\"partition\":").append(tp.partition()).append("}");
                }
                out.println("{\"name\":\"revocation_started\",\"partitions\":[" + list + "]}");
                try {
                    Thread.sleep(delayMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            super.onPartitionsRevoked(partitions);
        }
    }

    /** Each println of a member's events becomes one line of ours, labelled and timed. */
    static final class LabelledStream extends PrintStream {
        private final String label;

        LabelledStream(String label) {
            super(OutputStream.nullOutputStream(), true, StandardCharsets.UTF_8);
            this.label = label;
        }

        @Override
        public void println(String event) {
            long now = System.nanoTime();
            String json = event.startsWith("{") ? event : "{\"name\":\"unparsed\",\"text\":" + str(event) + "}";
            ConsumerHost.print("{\"member\":" + str(label) + ",\"mono_ns\":" + now + ",\"event\":" + json + "}");
        }
    }

    public static void main(String[] args) throws Exception {
        ConsumerHost host = new ConsumerHost();
        Runtime.getRuntime().addShutdownHook(new Thread(host::stopAll, "consumer-host-shutdown"));
        print("{\"host\":\"ready\"}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split("\t");
            try {
                if (fields[0].equals("start") && fields.length == 4) {
                    host.start(fields[1], fields[2], fields[3]);
                } else if (fields[0].equals("stop") && fields.length == 2) {
                    String label = fields[1];
                    new Thread(() -> {
                        try {
                            host.stop(label);
                        } catch (Exception e) {
                            error(label, e.getClass().getName() + ": " + e.getMessage());
                        }
                    }, "stop-" + label).start();
                } else if (fields[0].equals("tool") && fields.length >= 3) {
                    runTool(fields[1], fields[2], Arrays.copyOfRange(fields, 3, fields.length));
                } else if (fields[0].equals("exit")) {
                    break;
                } else {
                    error(null, "unknown command: " + line);
                }
            } catch (Exception e) {
                error(fields.length > 1 ? fields[1] : null, e.getClass().getName() + ": " + e.getMessage());
            }
        }
        host.stopAll();
        print("{\"host\":\"exit\"}");
        System.exit(0);
    }

    synchronized void start(String label, String propertiesFile, String topic) throws Exception {
        if (members.containsKey(label) && members.get(label).thread.isAlive()) {
            throw new IllegalStateException("member " + label + " is running");
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(propertiesFile)) {
            props.load(in);
        }
        long delayMs = Long.parseLong((String) props.getOrDefault(REVOKE_DELAY, "0"));
        props.remove(REVOKE_DELAY);
        props.put("enable.auto.commit", "false");
        props.putIfAbsent("auto.offset.reset", "earliest");
        StringDeserializer deserializer = new StringDeserializer();
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props, deserializer, deserializer);
        Member member = new Member(label, new SlowRevoker(consumer, new LabelledStream(label), topic, delayMs));
        members.put(label, member);
        hostEvent("started", label);
        member.thread.start();
    }

    void stop(String label) throws InterruptedException {
        Member member;
        synchronized (this) {
            member = members.get(label);
        }
        if (member == null) {
            throw new IllegalStateException("no member " + label);
        }
        if (!member.stopping.compareAndSet(false, true)) {
            return;  // stopped, or being stopped by another thread
        }
        member.consumer.close();  // wakes it; returns once it printed shutdown_complete
        member.thread.join();
        hostEvent("stopped", label);
    }

    void stopAll() {
        List<Member> running;
        synchronized (this) {
            running = new ArrayList<>(members.values());
        }
        List<Thread> stopping = new ArrayList<>();
        for (Member member : running) {
            if (member.thread.isAlive()) {
                Thread stopper = new Thread(() -> {
                    try {
                        stop(member.label);
                    } catch (Exception e) {
                        error(member.label, "stop: " + e);
                    }
                }, "stop-" + member.label);
                stopper.start();
                stopping.add(stopper);
            }
        }
        for (Thread stopper : stopping) {
            try {
                stopper.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Kafka's Exit.exit inside a tool: its status, thrown back to runTool. */
    static final class ToolExit extends RuntimeException {
        final int status;

        ToolExit(int status) {
            super(null, null, false, false);
            this.status = status;
        }
    }

    static void runTool(String id, String mainClass, String[] args) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        int status = 0;
        Exit.setExitProcedure((code, message) -> {
            throw new ToolExit(code);
        });
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof ToolExit) {
                status = ((ToolExit) e.getCause()).status;
            } else {
                e.getCause().printStackTrace();
                status = 1;
            }
        } finally {
            System.out.flush();
            System.err.flush();
            System.setOut(savedOut);
            System.setErr(savedErr);
            Exit.resetExitProcedure();
        }
        print("{\"host\":\"tool\",\"id\":" + str(id) + ",\"exit\":" + status + ",\"stdout\":"
                + str(out.toString(StandardCharsets.UTF_8)) + ",\"stderr\":" + str(err.toString(StandardCharsets.UTF_8))
                + "}");
    }

    static void hostEvent(String name, String label) {
        print("{\"host\":" + str(name) + ",\"member\":" + str(label) + ",\"mono_ns\":" + System.nanoTime() + "}");
    }

    static void error(String label, String message) {
        print("{\"host\":\"error\",\"member\":" + str(label) + ",\"error\":" + str(message) + "}");
    }

    static void print(String line) {  // called as ConsumerHost.print inside PrintStream subclasses
        synchronized (OUT) {
            STDOUT.println(line);
            STDOUT.flush();
        }
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
