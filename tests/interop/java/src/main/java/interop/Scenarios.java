package interop;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenarios of Apache RocketMQ's Java client (4.9.8) against a name server given on the command
 * line: {@code Scenarios namesrv=HOST:PORT prefix=NAME scenarios=send,orderly,...}. Every sent and
 * received message is printed as a JSON line; the pytest side (tests/interop/test_java_client.py)
 * checks the content. Message bodies follow {@link #body}, which the Python side recomputes.
 */
public final class Scenarios {
    private final String namesrv;
    private final String prefix;
    private final DefaultMQAdminExt admin;
    private final long deadlineMillis;

    private Scenarios(String namesrv, String prefix, long timeoutSeconds) throws Exception {
        this.namesrv = namesrv;
        this.prefix = prefix;
        this.deadlineMillis = timeoutSeconds * 1000;
        this.admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(prefix + "_admin");
        admin.start();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            opts.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Scenarios run = new Scenarios(opts.get("namesrv"), opts.get("prefix"),
            Long.parseLong(opts.getOrDefault("timeout", "60")));
        int failures = 0;
        for (String name : opts.get("scenarios").split(",")) {
            long started = System.currentTimeMillis();
            Json.of("begin").put("scenario", name).emit();
            try {
                run.scenario(name);
                Json.of("end").put("scenario", name).put("ok", true)
                    .put("millis", System.currentTimeMillis() - started).emit();
            } catch (Throwable e) {
                failures++;
                java.io.StringWriter trace = new java.io.StringWriter();
                e.printStackTrace(new java.io.PrintWriter(trace));
                Json.of("end").put("scenario", name).put("ok", false).put("error", trace.toString())
                    .put("millis", System.currentTimeMillis() - started).emit();
            }
        }
        run.admin.shutdown();
        System.exit(failures == 0 ? 0 : 1);
    }

    private void scenario(String name) throws Exception {
        switch (name) {
            case "send": send(); break;
            case "orderly": orderly(); break;
            case "transaction": transaction(); break;
            case "retry": retry(); break;
            case "delay": delay(); break;
            case "clustering": clustering(); break;
            case "broadcasting": broadcasting(); break;
            case "litepull": litePull(); break;
            case "pull": pull(); break;
            case "fromslave": fromSlave(); break;
            case "failover": failover(); break;
            default: throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    // ---- helpers ------------------------------------------------------------------------

    /** The body of message {@code i} of a scenario: "scenario:i;" repeated up to {@code size} bytes. */
    static byte[] body(String scenario, int i, int size) {
        String unit = scenario + ":" + i + ";";
        StringBuilder text = new StringBuilder(size + unit.length());
        while (text.length() < size) {
            text.append(unit);
        }
        return text.substring(0, size).getBytes(StandardCharsets.UTF_8);
    }

    static String sha256(byte[] data) throws Exception {
        byte[] digest = MessageDigest.getInstance("SHA-256").digest(data);
        StringBuilder hex = new StringBuilder();
        for (byte b : digest) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    static Message message(String topic, String scenario, String kind, int i, int size) {
        Message msg = new Message(topic, kind, "key-" + kind + "-" + i, body(scenario, i, size));
        msg.putUserProperty("kind", kind);
        msg.putUserProperty("idx", Integer.toString(i));
        msg.putUserProperty("size", Integer.toString(size));
        return msg;
    }

    static void emitSent(String scenario, String kind, int i, SendResult result) {
        Json json = Json.of("sent").put("scenario", scenario).put("kind", kind).put("i", i);
        if (result != null) {
            json.put("status", result.getSendStatus().name()).put("msgId", result.getMsgId())
                .put("offsetMsgId", result.getOffsetMsgId())
                .put("queueId", result.getMessageQueue().getQueueId())
                .put("broker", result.getMessageQueue().getBrokerName())
                .put("queueOffset", result.getQueueOffset());
        }
        json.emit();
    }

    static Json received(String scenario, String consumer, MessageExt msg) throws Exception {
        Map<String, String> props = new LinkedHashMap<>(msg.getProperties());
        return Json.of("recv").put("scenario", scenario).put("consumer", consumer)
            .put("topic", msg.getTopic()).put("queueId", msg.getQueueId())
            .put("queueOffset", msg.getQueueOffset()).put("msgId", msg.getMsgId())
            .put("tags", msg.getTags()).put("keys", msg.getKeys())
            .put("bodyLen", msg.getBody().length).put("bodySha", sha256(msg.getBody()))
            .put("reconsumeTimes", msg.getReconsumeTimes())
            .put("bornTimestamp", msg.getBornTimestamp()).put("storeTimestamp", msg.getStoreTimestamp())
            .put("receivedAt", System.currentTimeMillis()).put("props", props);
    }

    private String topic(String scenario) {
        return prefix + "_" + scenario;
    }

    private String group(String scenario, String role) {
        return prefix + "_" + scenario + "_" + role;
    }

    /** Creates a topic on every master of the cluster and waits until its route is served. */
    private void createTopic(String topic, int queues) throws Exception {
        ClusterInfo info = admin.examineBrokerClusterInfo();
        java.util.Set<String> brokers = new java.util.TreeSet<>();
        for (BrokerData broker : info.getBrokerAddrTable().values()) {
            String master = broker.getBrokerAddrs().get(0L);
            TopicConfig config = new TopicConfig(topic, queues, queues, 6);
            admin.createAndUpdateTopicConfig(master, config);
            brokers.add(broker.getBrokerName());
        }
        // Wait until the route names every broker written to (a cluster may have several).
        long until = System.currentTimeMillis() + deadlineMillis;
        while (true) {
            try {
                TopicRouteData route = admin.examineTopicRouteInfo(topic);
                java.util.Set<String> routed = new java.util.TreeSet<>();
                for (org.apache.rocketmq.common.protocol.route.QueueData queue : route.getQueueDatas()) {
                    routed.add(queue.getBrokerName());
                }
                if (routed.containsAll(brokers)) {
                    return;
                }
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("route of " + topic + " names " + routed + ", not " + brokers);
                }
            } catch (Exception e) {
                if (System.currentTimeMillis() > until) {
                    throw e;
                }
            }
            Thread.sleep(100);
        }
    }

    private DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(group);
        producer.start();
        return producer;
    }

    private DefaultMQPushConsumer pushConsumer(String group, String instance, String topic) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        return consumer;
    }

    /**
     * Push consumers c1 and c2 of the scenario's consumer group on topic, in model, started; each
     * message either receives is reported and counted down on received.
     */
    private List<DefaultMQPushConsumer> startConsumerPair(
            String scenario, String topic, MessageModel model, CountDownLatch received) throws Exception {
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (String name : Arrays.asList("c1", "c2")) {
            DefaultMQPushConsumer consumer = pushConsumer(group(scenario, "cg"), group(scenario, name), topic);
            consumer.setMessageModel(model);
            consumer.registerMessageListener(reporting(scenario, name, received));
            consumer.start();
            consumers.add(consumer);
        }
        return consumers;
    }

    /** Sends messages 0..total-1 of kind to topic from the scenario's producer group, reporting each. */
    private void sendNumbered(String scenario, String topic, String kind, int total) throws Exception {
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        for (int i = 0; i < total; i++) {
            emitSent(scenario, kind, i, producer.send(message(topic, scenario, kind, i, 80)));
        }
        producer.shutdown();
    }

    private static void shutdownAll(List<DefaultMQPushConsumer> consumers) {
        for (DefaultMQPushConsumer consumer : consumers) {
            consumer.shutdown();
        }
    }

    private void await(CountDownLatch latch, String what) throws InterruptedException {
        if (!latch.await(deadlineMillis, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("timed out waiting for " + what + " (" + latch.getCount() + " left)");
        }
    }

    // ---- scenarios ----------------------------------------------------------------------

    /** Sync, async, oneway and batch sends (some bodies above the 4 KiB compression threshold), consumed back. */
    private void send() throws Exception {
        String scenario = "send";
        String topic = topic(scenario);
        createTopic(topic, 4);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        // Five in a row from one thread: the client's round robin then always reaches a second
        // broker's queues when the topic spans two (four queues each).
        int[] syncSizes = {6000, 100, 300, 150, 250};
        for (int i = 0; i < syncSizes.length; i++) {
            emitSent(scenario, "sync", i, producer.send(message(topic, scenario, "sync", i, syncSizes[i])));
        }
        int[] asyncSizes = {200, 5000, 64};
        CountDownLatch acked = new CountDownLatch(asyncSizes.length);
        for (int i = 0; i < asyncSizes.length; i++) {
            final int index = i;
            producer.send(message(topic, scenario, "async", i, asyncSizes[i]), new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    emitSent(scenario, "async", index, result);
                    acked.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    Json.of("error").put("scenario", scenario).put("kind", "async").put("i", index)
                        .put("error", String.valueOf(e)).emit();
                    acked.countDown();
                }
            });
        }
        await(acked, "async send results");
        int[] onewaySizes = {4500, 10};
        for (int i = 0; i < onewaySizes.length; i++) {
            producer.sendOneway(message(topic, scenario, "oneway", i, onewaySizes[i]));
            emitSent(scenario, "oneway", i, null);
        }
        int[] batchSizes = {4500, 20, 30, 40};
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < batchSizes.length; i++) {
            batch.add(message(topic, scenario, "batch", i, batchSizes[i]));
        }
        SendResult batchResult = producer.send(batch);
        String[] ids = batchResult.getMsgId().split(",");
        for (int i = 0; i < batchSizes.length; i++) {
            Json.of("sent").put("scenario", scenario).put("kind", "batch").put("i", i)
                .put("status", batchResult.getSendStatus().name()).put("msgId", ids[i])
                .put("queueId", batchResult.getMessageQueue().getQueueId())
                .put("queueOffset", batchResult.getQueueOffset() + i).emit();
        }
        producer.shutdown();
        int total = syncSizes.length + asyncSizes.length + onewaySizes.length + batchSizes.length;
        consumeAll(scenario, topic, total);
    }

    private void consumeAll(String scenario, String topic, int total) throws Exception {
        consumeAll(scenario, topic, total, "messages of " + topic);
    }

    /** One push consumer (c1) of the scenario's group takes total messages of topic, reporting each. */
    private void consumeAll(String scenario, String topic, int total, String what) throws Exception {
        CountDownLatch received = new CountDownLatch(total);
        DefaultMQPushConsumer consumer = pushConsumer(group(scenario, "cg"), group(scenario, "c1"), topic);
        consumer.registerMessageListener(reporting(scenario, "c1", received));
        consumer.start();
        try {
            await(received, what);
        } finally {
            consumer.shutdown();
        }
    }

    /** A concurrent listener that reports each message as received by name and counts it down. */
    private static MessageListenerConcurrently reporting(String scenario, String name, CountDownLatch received) {
        return (msgs, context) -> {
            for (MessageExt msg : msgs) {
                try {
                    received(scenario, name, msg).emit();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                received.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    /** Orderly sends with a queue selector (by key) and an orderly listener: per-key order. */
    private void orderly() throws Exception {
        String scenario = "orderly";
        String topic = topic(scenario);
        createTopic(topic, 4);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        String[] keys = {"alpha", "beta", "gamma"};
        int perKey = 8;
        for (int seq = 0; seq < perKey; seq++) {
            for (int k = 0; k < keys.length; k++) {
                Message msg = message(topic, scenario, keys[k], seq, 50 + seq);
                msg.putUserProperty("seq", Integer.toString(seq));
                SendResult result = producer.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), k);
                emitSent(scenario, keys[k], seq, result);
            }
        }
        producer.shutdown();
        CountDownLatch received = new CountDownLatch(keys.length * perKey);
        DefaultMQPushConsumer consumer = pushConsumer(group(scenario, "cg"), group(scenario, "c1"), topic);
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                try {
                    received(scenario, "c1", msg).emit();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                received.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        try {
            await(received, "orderly messages");
        } finally {
            consumer.shutdown();
        }
    }

    /** A transaction producer: one commit, one rollback, one left unknown and committed on check-back. */
    private void transaction() throws Exception {
        String scenario = "transaction";
        String topic = topic(scenario);
        createTopic(topic, 1);
        CountDownLatch checked = new CountDownLatch(1);
        TransactionMQProducer producer = new TransactionMQProducer(group(scenario, "pg"));
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(group(scenario, "pg"));
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch (msg.getUserProperty("decision")) {
                    case "commit": return LocalTransactionState.COMMIT_MESSAGE;
                    case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                Json.of("check").put("scenario", scenario).put("keys", msg.getKeys())
                    .put("transactionId", msg.getTransactionId())
                    .put("decision", msg.getUserProperty("decision")).emit();
                checked.countDown();
                return "unknown".equals(msg.getUserProperty("decision"))
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer.start();
        String[] decisions = {"commit", "rollback", "unknown"};
        for (int i = 0; i < decisions.length; i++) {
            Message msg = message(topic, scenario, decisions[i], i, 100);
            msg.putUserProperty("decision", decisions[i]);
            TransactionSendResult result = producer.sendMessageInTransaction(msg, null);
            Json.of("sent").put("scenario", scenario).put("kind", decisions[i]).put("i", i)
                .put("status", result.getSendStatus().name()).put("msgId", result.getMsgId())
                .put("transactionId", result.getTransactionId())
                .put("localState", result.getLocalTransactionState().name()).emit();
        }
        try {
            // Two messages become visible: the committed one, and the unknown one after check-back.
            consumeAll(scenario, topic, 2);
            await(checked, "a transaction check-back");
        } finally {
            producer.shutdown();
        }
    }

    /** A listener that always fails: redelivery from %RETRY%group, then the message lands in %DLQ%group. */
    private void retry() throws Exception {
        String scenario = "retry";
        String topic = topic(scenario);
        String group = group(scenario, "cg");
        createTopic(topic, 1);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        emitSent(scenario, "retry", 0, producer.send(message(topic, scenario, "retry", 0, 5000)));
        producer.shutdown();
        int maxReconsume = 2;
        CountDownLatch deliveries = new CountDownLatch(maxReconsume + 1);
        DefaultMQPushConsumer consumer = pushConsumer(group, group(scenario, "c1"), topic);
        consumer.setMaxReconsumeTimes(maxReconsume);
        // The group's %RETRY% topic is created by the consumer's first heartbeat, after the client
        // looked its route up: poll routes every second so the retry queue is found at once (with
        // Apache's broker too) rather than at the default 30 s poll.
        consumer.setPollNameServerInterval(1000);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                try {
                    received(scenario, "c1", msg).emit();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                deliveries.countDown();
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        consumer.start();
        try {
            await(deliveries, "redeliveries");
            String dlq = "%DLQ%" + group;
            long until = System.currentTimeMillis() + deadlineMillis;
            while (true) {
                try {
                    List<MessageExt> found = admin.queryMessage(dlq, "key-retry-0", 32, 0, Long.MAX_VALUE).getMessageList();
                    if (!found.isEmpty()) {
                        for (MessageExt msg : found) {
                            Json json = received(scenario, "dlq", msg);
                            json.put("event", "dlq").emit();
                        }
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > until) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("no message in " + dlq);
                }
                Thread.sleep(200);
            }
        } finally {
            consumer.shutdown();
        }
    }

    /** A delayed message (level 3) sent before a plain one arrives after it. */
    private void delay() throws Exception {
        String scenario = "delay";
        String topic = topic(scenario);
        createTopic(topic, 1);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        Message delayed = message(topic, scenario, "delayed", 0, 100);
        delayed.setDelayTimeLevel(3);
        Json.of("sending").put("scenario", scenario).put("kind", "delayed").put("at", System.currentTimeMillis()).emit();
        emitSent(scenario, "delayed", 0, producer.send(delayed));
        emitSent(scenario, "plain", 1, producer.send(message(topic, scenario, "plain", 1, 100)));
        producer.shutdown();
        consumeAll(scenario, topic, 2);
    }

    /** Two push consumers of one group share the queues: every message once, to one of them. */
    private void clustering() throws Exception {
        String scenario = "clustering";
        String topic = topic(scenario);
        createTopic(topic, 4);
        int total = 16;
        CountDownLatch received = new CountDownLatch(total);
        List<DefaultMQPushConsumer> consumers = startConsumerPair(scenario, topic, MessageModel.CLUSTERING, received);
        try {
            // Send only once the rebalance gave each consumer two of the four queues.
            long until = System.currentTimeMillis() + deadlineMillis;
            while (true) {
                List<Integer> owned = new ArrayList<>();
                for (DefaultMQPushConsumer consumer : consumers) {
                    // The table also holds the group's %RETRY% queue: count the topic's own.
                    int count = 0;
                    for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                        if (mq.getTopic().equals(topic)) {
                            count++;
                        }
                    }
                    owned.add(count);
                }
                if (owned.equals(Arrays.asList(2, 2))) {
                    Json.of("balanced").put("scenario", scenario).put("queues", owned).emit();
                    break;
                }
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("rebalance never split the queues: " + owned);
                }
                Thread.sleep(100);
            }
            sendNumbered(scenario, topic, "clustering", total);
            await(received, "clustered messages");
            // Shutting the pair down one by one rebalances the first one's queues onto the
            // survivor, which reads their offsets from the broker. Those may be older than the
            // last message consumed: the listener counts the latch down before it returns, so
            // the offset it consumed may not be in the offset store yet when shutdown persists
            // it; and the 4.9.8 client persists offsets oneway (over the VIP channel when that is
            // on) but unregisters with a request of its own, which the broker may handle first.
            // Either way the survivor redelivers (at least once, with Apache's broker too).
            // Records after this are that.
            Json.of("stopping").put("scenario", scenario).emit();
        } finally {
            shutdownAll(consumers);
        }
    }

    /** Two broadcasting consumers of one group each get every message. */
    private void broadcasting() throws Exception {
        String scenario = "broadcasting";
        String topic = topic(scenario);
        createTopic(topic, 2);
        int total = 6;
        CountDownLatch received = new CountDownLatch(2 * total);
        List<DefaultMQPushConsumer> consumers = startConsumerPair(scenario, topic, MessageModel.BROADCASTING, received);
        try {
            sendNumbered(scenario, topic, "broadcasting", total);
            await(received, "broadcast messages");
        } finally {
            shutdownAll(consumers);
        }
    }

    /** DefaultLitePullConsumer: subscribe; assign (a new group starts at offset 0); seek; seek back to the beginning. */
    private void litePull() throws Exception {
        String scenario = "litepull";
        String topic = topic(scenario);
        createTopic(topic, 2);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        int total = 10;
        for (int i = 0; i < total; i++) {
            SendResult result = producer.send(message(topic, scenario, "litepull", i, 90),
                (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), i);
            emitSent(scenario, "litepull", i, result);
        }
        producer.shutdown();

        DefaultLitePullConsumer subscriber = new DefaultLitePullConsumer(group(scenario, "sub"));
        subscriber.setNamesrvAddr(namesrv);
        subscriber.setInstanceName(group(scenario, "sub"));
        subscriber.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        subscriber.subscribe(topic, "*");
        subscriber.start();
        try {
            pollUntil(subscriber, scenario, "subscribe", total);
        } finally {
            subscriber.shutdown();
        }

        DefaultLitePullConsumer assigned = new DefaultLitePullConsumer(group(scenario, "assign"));
        assigned.setNamesrvAddr(namesrv);
        assigned.setInstanceName(group(scenario, "assign"));
        assigned.setAutoCommit(false);
        assigned.start();
        try {
            Collection<MessageQueue> mqs = assigned.fetchMessageQueues(topic);
            List<MessageQueue> queue0 = new ArrayList<>();
            for (MessageQueue mq : mqs) {
                if (mq.getQueueId() == 0) {
                    queue0.add(mq);
                }
            }
            assigned.assign(queue0);
            // assign() starts a pull at once. The 4.9.8 client's seek() races with a pull that is
            // already in flight (one that passed its cancel check before seek() cancelled it applies
            // its batch after the seek), so the seeks wait until that first pull has landed and the
            // queue's task is parked in a long poll at the end of the queue.
            pollUntil(assigned, scenario, "assign", total / 2);
            assigned.seek(queue0.get(0), 2);
            pollUntil(assigned, scenario, "seek2", total / 2 - 2);
            assigned.seekToBegin(queue0.get(0));
            pollUntil(assigned, scenario, "seekBegin", total / 2);
        } finally {
            assigned.shutdown();
        }
    }

    private void pollUntil(DefaultLitePullConsumer consumer, String scenario, String mode, int count) throws Exception {
        int seen = 0;
        long until = System.currentTimeMillis() + deadlineMillis;
        while (seen < count) {
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException(mode + ": polled " + seen + " of " + count);
            }
            for (MessageExt msg : consumer.poll(1000)) {
                received(scenario, mode, msg).emit();
                seen++;
            }
        }
    }

    /** DefaultMQPullConsumer: found, no new message, offset illegal, tag filter, offsets stored on the broker. */
    private void pull() throws Exception {
        String scenario = "pull";
        String topic = topic(scenario);
        createTopic(topic, 1);
        DefaultMQProducer producer = producer(group(scenario, "pg"));
        for (int i = 0; i < 5; i++) {
            Message msg = message(topic, scenario, i % 2 == 0 ? "even" : "odd", i, 70);
            emitSent(scenario, msg.getTags(), i, producer.send(msg));
        }
        producer.shutdown();
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group(scenario, "cg"));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group(scenario, "cg"));
        consumer.start();
        try {
            MessageQueue mq = consumer.fetchSubscribeMessageQueues(topic).iterator().next();
            Json.of("offsets").put("scenario", scenario).put("min", consumer.minOffset(mq))
                .put("max", consumer.maxOffset(mq)).emit();
            emitPull(scenario, "all", "*", 0, consumer.pull(mq, "*", 0, 32));
            emitPull(scenario, "even", "even", 0, consumer.pull(mq, "even", 0, 32));
            emitPull(scenario, "end", "*", 5, consumer.pull(mq, "*", 5, 32));
            emitPull(scenario, "beyond", "*", 100, consumer.pull(mq, "*", 100, 32));
            consumer.getOffsetStore().updateConsumeOffsetToBroker(mq, 3, false);
            Json.of("committed").put("scenario", scenario)
                .put("offset", consumer.fetchConsumeOffset(mq, true)).emit();
        } finally {
            consumer.shutdown();
        }
    }

    private static void emitPull(String scenario, String label, String expression, long offset, PullResult result) throws Exception {
        Json.of("pull").put("scenario", scenario).put("label", label).put("expression", expression)
            .put("offset", offset).put("status", result.getPullStatus().name())
            .put("nextBeginOffset", result.getNextBeginOffset()).put("minOffset", result.getMinOffset())
            .put("maxOffset", result.getMaxOffset()).emit();
        if (result.getMsgFoundList() != null) {
            for (MessageExt msg : result.getMsgFoundList()) {
                Json json = received(scenario, label, msg);
                json.put("event", "pulled").emit();
            }
        }
    }


    /**
     * Consumes the 16 messages the test stored in {@code <prefix>_fromslave} before it killed
     * the broker's master: the route lists only the slave (brokerId 1), so the client pulls there.
     */
    private void fromSlave() throws Exception {
        consumeAll("fromslave", topic("fromslave"), 16, "the messages on the slave");
    }

    /**
     * For a master failover driven from outside (tests/interop/test_controller_clients.py): a
     * push consumer of the scenario's group and a SYNC send loop on the scenario's topic (created
     * by the test), every send outcome and every delivery printed with the wall clock, until
     * the line "stop" on stdin stops the sends and "quit" (or the end of stdin) the consumer.
     */
    private void failover() throws Exception {
        String scenario = "failover";
        String topic = topic(scenario);
        java.io.BufferedReader in = new java.io.BufferedReader(
            new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        DefaultMQPushConsumer consumer = pushConsumer(group(scenario, "cg"), group(scenario, "c1"), topic);
        // How often the clients ask the name server for routes (the client default: 30 s).
        int poll = Integer.getInteger("failover.pollNameServerInterval", 30000);
        consumer.setPollNameServerInterval(poll);
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                Json.of("recv").put("scenario", scenario).put("keys", msg.getKeys())
                    .put("queueId", msg.getQueueId()).put("queueOffset", msg.getQueueOffset())
                    .put("at", System.currentTimeMillis()).emit();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = new DefaultMQProducer(group(scenario, "pg"));
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(group(scenario, "pg"));
        producer.setSendMsgTimeout(3000);
        producer.setPollNameServerInterval(poll);
        producer.start();
        java.util.concurrent.atomic.AtomicBoolean sending = new java.util.concurrent.atomic.AtomicBoolean(true);
        Thread sender = new Thread(() -> {
            for (int i = 0; sending.get(); i++) {
                String key = "jf-" + i;
                Message msg = new Message(topic, "failover", key, body(scenario, i, 128));
                long started = System.currentTimeMillis();
                try {
                    SendResult result = producer.send(msg);
                    Json.of("sent").put("scenario", scenario).put("keys", key)
                        .put("status", result.getSendStatus().name())
                        .put("queueId", result.getMessageQueue().getQueueId())
                        .put("queueOffset", result.getQueueOffset())
                        .put("started", started).put("at", System.currentTimeMillis()).emit();
                } catch (Exception e) {
                    Json.of("senderror").put("scenario", scenario).put("keys", key)
                        .put("error", e.getClass().getSimpleName() + ": " + e.getMessage())
                        .put("started", started).put("at", System.currentTimeMillis()).emit();
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException interrupted) {
                        return;
                    }
                }
            }
        });
        sender.start();
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("quit")) {
            if (line.trim().equals("stop")) {
                sending.set(false);
                sender.join();
                Json.of("stopped").put("scenario", scenario).emit();
            }
        }
        sending.set(false);
        sender.join();
        producer.shutdown();
        consumer.shutdown();
    }
}
