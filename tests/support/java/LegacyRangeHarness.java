// Kafka 1.1.1's own legacy range assignment (kafka.consumer.RangeAssignor,
// reading registrations with kafka.consumer.TopicCount), run on cases given
// as JSON lines on stdin, without ZooKeeper: the ZkUtils the assignor reads
// through is a subclass answering from the case. One answer line per case:
//   in:  {"id":"1","group":"g","exclude_internal":true,
//         "ids":{"<consumer id>":"<registration JSON, as stored>"},
//         "topics":{"<topic>":[<partition>,...]}}
//   out: {"id":"1","shares":{"<consumer id>":{"<topic>/<partition>":"<thread id>"}}}
//        or {"id":"1","error":"<what Kafka threw>"}
// Each consumer's share is what that consumer computes for itself in its
// rebalance (AssignmentContext with its own consumer id).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.*;
import kafka.common.TopicAndPartition;
import kafka.consumer.AssignmentContext;
import kafka.consumer.ConsumerThreadId;
import kafka.consumer.RangeAssignor;
import kafka.utils.ZkUtils;
import org.apache.zookeeper.data.Stat;
import scala.Option;
import scala.Tuple2;
import scala.collection.JavaConverters;
import scala.collection.Seq;

public class LegacyRangeHarness {
    static final ObjectMapper MAPPER = new ObjectMapper();

    static class CaseZk extends ZkUtils {
        final String idsPath;
        final Map<String, String> ids;
        final Map<String, String> topics = new TreeMap<>();

        CaseZk(String group, JsonNode input) {
            super(null, null, false);
            idsPath = "/consumers/" + group + "/ids";
            ids = new TreeMap<>();
            input.get("ids").fields().forEachRemaining(e -> ids.put(e.getKey(), e.getValue().asText()));
            input.get("topics").fields().forEachRemaining(e -> {
                ObjectNode partitions = MAPPER.createObjectNode();
                e.getValue().forEach(p -> partitions.putArray(p.asText()).add(0));
                ObjectNode registration = MAPPER.createObjectNode();
                registration.put("version", 1);
                registration.set("partitions", partitions);
                topics.put(e.getKey(), registration.toString());
            });
        }

        static Seq<String> seq(Collection<String> values) {
            return JavaConverters.asScalaBufferConverter(new ArrayList<>(values)).asScala();
        }

        @Override
        public Tuple2<String, Stat> readData(String path) {
            String id = path.substring(idsPath.length() + 1);
            return new Tuple2<>(ids.get(id), new Stat());
        }

        @Override
        public Tuple2<Option<String>, Stat> readDataMaybeNull(String path) {
            String topic = path.substring("/brokers/topics/".length());
            return new Tuple2<>(Option.apply(topics.get(topic)), new Stat());
        }

        @Override
        public Seq<String> getChildren(String path) {
            return getChildrenParentMayNotExist(path);
        }

        @Override
        public Seq<String> getChildrenParentMayNotExist(String path) {
            if (path.equals(idsPath)) return seq(ids.keySet());
            if (path.equals("/brokers/topics")) return seq(topics.keySet());
            throw new IllegalArgumentException("unexpected read of " + path);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) continue;
            JsonNode input = MAPPER.readTree(line);
            ObjectNode out = MAPPER.createObjectNode();
            out.put("id", input.get("id").asText());
            try {
                String group = input.get("group").asText();
                boolean excludeInternal = input.get("exclude_internal").asBoolean();
                CaseZk zk = new CaseZk(group, input);
                ObjectNode shares = out.putObject("shares");
                for (String consumer : zk.ids.keySet()) {
                    AssignmentContext ctx = new AssignmentContext(group, consumer, excludeInternal, zk);
                    scala.collection.mutable.Map<TopicAndPartition, ConsumerThreadId> mine =
                        new RangeAssignor().assign(ctx).get(consumer);
                    ObjectNode share = shares.putObject(consumer);
                    for (Map.Entry<TopicAndPartition, ConsumerThreadId> e
                            : JavaConverters.mapAsJavaMapConverter(mine).asJava().entrySet()) {
                        share.put(e.getKey().topic() + "/" + e.getKey().partition(), e.getValue().toString());
                    }
                }
            } catch (Throwable e) {
                out.remove("shares");
                out.put("error", e.toString());
            }
            System.out.println(out.toString());
            System.out.flush();
        }
    }
}
