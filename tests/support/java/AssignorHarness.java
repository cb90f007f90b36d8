/*
 * Kafka's own server-side assignors, run on inputs read as JSON lines from
 * stdin, one JSON line of output per input line on stdout. Compiled at test
 * time against the Kafka 4.4.0 jars (tests/support/kafka_assignors.py).
 *
 * The group spec is built as Kafka's TargetAssignmentBuilder builds it:
 * members put into a new HashMap in the input's order, wrapped unmodifiable;
 * subscribed topics as Kafka's TopicIds over new HashSet<>(names); current
 * assignments through Assignment.fromRecord of a
 * ConsumerGroupTargetAssignmentMemberValue in the input's order (or
 * Assignment.EMPTY); the subscription type from ModernGroup.subscriptionType
 * unless the input gives one.
 *
 * Input lines:
 *   {"id": .., "assignor": "uniform"|"range",
 *    "topics": [{"name": .., "id": <Uuid>, "partitions": n}],
 *    "members": [{"id": .., "instance": ..|null, "rack": ..|null,
 *                 "topics": [names], "assignment": [[<Uuid>, [partitions]], ..]}],
 *    "type": "HOMOGENEOUS"|"HETEROGENEOUS"|null,
 *    "bench": {"warmup": w, "iterations": k}  (optional: time k runs after w)}
 *   {"id": .., "hash": {"kind": "int"|"string"|"uuid", "capacity": n|null,
 *    "from": [keys]|null, "ops": [[op, key], ..]}}  (see hashOrder)
 * Output lines:
 *   {"id": .., "members": [[memberId, [[<Uuid>, [partitions]], ..]], ..],
 *    "nanos": [..], "cpu_nanos": [..]}  (bench: wall and thread CPU time per timed run)
 *     members in input order (absent from Kafka's result: left out), each
 *     one's map and sets in Kafka's iteration order (its record's order)
 *   {"id": .., "error": "<exception class>: <message>"}
 *   {"id": .., "order": [keys]}
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.generated.ConsumerGroupTargetAssignmentMemberValue;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;
import org.apache.kafka.coordinator.group.modern.ModernGroup;
import org.apache.kafka.coordinator.group.modern.SubscriptionCount;
import org.apache.kafka.coordinator.group.modern.TopicIds;

import java.io.BufferedReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

public class AssignorHarness {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** Topic names to ids and back, as the coordinator's metadata image resolves them. */
    static final class Resolver implements TopicIds.TopicResolver {
        final Map<String, Uuid> ids = new HashMap<>();
        final Map<Uuid, String> names = new HashMap<>();

        public CoordinatorMetadataImage image() { return null; }
        public String name(Uuid id) { return names.get(id); }
        public Uuid id(String name) { return ids.get(name); }
        public void clear() { }
    }

    /** One parsed assignment case: what assign() is called with. */
    static final class Case {
        GroupSpecImpl spec;
        SubscribedTopicDescriber describer;
        ConsumerGroupPartitionAssignor assignor;
        List<String> memberOrder = new ArrayList<>();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode input = JSON.readTree(line);
            ObjectNode output = JSON.createObjectNode();
            output.set("id", input.get("id"));
            try {
                if (input.has("hash")) {
                    output.set("order", hashOrder(input.get("hash")));
                } else {
                    run(input, output);
                }
            } catch (Exception e) {
                output.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            out.println(JSON.writeValueAsString(output));
            out.flush();
        }
    }

    static void run(JsonNode input, ObjectNode output) throws Exception {
        Case c = parse(input);
        JsonNode bench = input.get("bench");
        if (bench != null) {
            for (int i = 0; i < bench.get("warmup").asInt(); i++) {
                c.assignor.assign(c.spec, c.describer);
            }
            ArrayNode nanos = output.putArray("nanos");
            ArrayNode cpuNanos = output.putArray("cpu_nanos");
            ThreadMXBean threads = ManagementFactory.getThreadMXBean();
            for (int i = 0; i < bench.get("iterations").asInt(); i++) {
                long cpu = threads.getCurrentThreadCpuTime();
                long start = System.nanoTime();
                c.assignor.assign(c.spec, c.describer);
                nanos.add(System.nanoTime() - start);
                cpuNanos.add(threads.getCurrentThreadCpuTime() - cpu);
            }
        }
        GroupAssignment result = c.assignor.assign(c.spec, c.describer);
        ArrayNode members = output.putArray("members");
        for (String memberId : c.memberOrder) {
            MemberAssignment assignment = result.members().get(memberId);
            if (assignment == null) continue;
            ArrayNode member = members.addArray();
            member.add(memberId);
            ArrayNode topics = member.addArray();
            for (Map.Entry<Uuid, Set<Integer>> entry : assignment.partitions().entrySet()) {
                ArrayNode topic = topics.addArray();
                topic.add(entry.getKey().toString());
                ArrayNode partitions = topic.addArray();
                for (int partition : entry.getValue()) partitions.add(partition);
            }
        }
    }

    static Case parse(JsonNode input) {
        Case c = new Case();
        Resolver resolver = new Resolver();
        Map<Uuid, Integer> partitionCounts = new HashMap<>();
        for (JsonNode topic : input.get("topics")) {
            Uuid id = Uuid.fromString(topic.get("id").asText());
            resolver.ids.put(topic.get("name").asText(), id);
            resolver.names.put(id, topic.get("name").asText());
            partitionCounts.put(id, topic.get("partitions").asInt());
        }
        Map<String, MemberSubscriptionAndAssignmentImpl> members = new HashMap<>();
        Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
        Map<String, SubscriptionCount> subscribedNames = new HashMap<>();
        for (JsonNode member : input.get("members")) {
            String memberId = member.get("id").asText();
            c.memberOrder.add(memberId);
            List<String> names = new ArrayList<>();
            for (JsonNode name : member.get("topics")) names.add(name.asText());
            Set<String> nameSet = new HashSet<>(names);
            for (String name : nameSet) {
                SubscriptionCount old = subscribedNames.get(name);
                subscribedNames.put(name, new SubscriptionCount(old == null ? 1 : old.byNameCount() + 1, 0));
            }
            ConsumerGroupTargetAssignmentMemberValue record = new ConsumerGroupTargetAssignmentMemberValue();
            List<ConsumerGroupTargetAssignmentMemberValue.TopicPartition> topicPartitions = new ArrayList<>();
            for (JsonNode entry : member.get("assignment")) {
                Uuid topicId = Uuid.fromString(entry.get(0).asText());
                List<Integer> partitions = new ArrayList<>();
                for (JsonNode p : entry.get(1)) {
                    partitions.add(p.asInt());
                    inverted.computeIfAbsent(topicId, k -> new HashMap<>()).put(p.asInt(), memberId);
                }
                topicPartitions.add(new ConsumerGroupTargetAssignmentMemberValue.TopicPartition()
                    .setTopicId(topicId).setPartitions(partitions));
            }
            record.setTopicPartitions(topicPartitions);
            Assignment assignment = topicPartitions.isEmpty() ? Assignment.EMPTY : Assignment.fromRecord(record);
            members.put(memberId, new MemberSubscriptionAndAssignmentImpl(
                Optional.ofNullable(text(member, "rack")),
                Optional.ofNullable(text(member, "instance")),
                new TopicIds(nameSet, resolver),
                assignment));
        }
        String type = text(input, "type");
        SubscriptionType subscriptionType = type != null ? SubscriptionType.valueOf(type)
            : ModernGroup.subscriptionType(subscribedNames, members.size());
        c.spec = new GroupSpecImpl(Collections.unmodifiableMap(members), subscriptionType, inverted);
        c.describer = new SubscribedTopicDescriber() {
            public int numPartitions(Uuid topicId) { return partitionCounts.getOrDefault(topicId, -1); }
            public Set<String> racksForPartition(Uuid topicId, int partition) { return Set.of(); }
        };
        String assignor = input.get("assignor").asText();
        c.assignor = assignor.equals("range") ? new RangeAssignor() : new UniformAssignor();
        if (!c.assignor.name().equals(assignor)) {
            throw new IllegalArgumentException("unknown assignor " + assignor);
        }
        return c;
    }

    static String text(JsonNode node, String field) {
        JsonNode value = node.get(field);
        return value == null || value.isNull() ? null : value.asText();
    }

    /**
     * The iteration order of a HashSet built from "from" (then ops 1: add,
     * 0: remove), or else of a HashMap built with "capacity" (null: the
     * default) and ops 1: put, 0: remove, 2: computeIfAbsent.
     */
    @SuppressWarnings("unchecked")
    static ArrayNode hashOrder(JsonNode spec) {
        String kind = spec.get("kind").asText();
        JsonNode fromNode = spec.get("from");
        JsonNode capacity = spec.get("capacity");
        Collection<Object> keys;
        if (fromNode != null && !fromNode.isNull()) {
            List<Object> from = new ArrayList<>();
            for (JsonNode key : fromNode) from.add(key(kind, key));
            Set<Object> set = new HashSet<>(from);
            for (JsonNode op : spec.get("ops")) {
                Object key = key(kind, op.get(1));
                if (op.get(0).asInt() == 1) set.add(key); else set.remove(key);
            }
            keys = set;
        } else {
            Map<Object, Object> map = capacity != null && !capacity.isNull()
                ? new HashMap<>(capacity.asInt()) : new HashMap<>();
            for (JsonNode op : spec.get("ops")) {
                Object key = key(kind, op.get(1));
                switch (op.get(0).asInt()) {
                    case 1: map.put(key, Boolean.TRUE); break;
                    case 2: map.computeIfAbsent(key, k -> Boolean.TRUE); break;
                    default: map.remove(key);
                }
            }
            keys = map.keySet();
        }
        ArrayNode order = JSON.createArrayNode();
        for (Object key : keys) {
            if (key instanceof Integer) order.add((Integer) key); else order.add(key.toString());
        }
        return order;
    }

    static Object key(String kind, JsonNode node) {
        switch (kind) {
            case "int": return node.asInt();
            case "uuid": return Uuid.fromString(node.asText());
            default: return node.asText();
        }
    }
}
