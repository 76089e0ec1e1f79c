package interop53;

import interop.Json;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.trace.TraceBean;
import org.apache.rocketmq.client.trace.TraceContext;
import org.apache.rocketmq.client.trace.TraceDataEncoder;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageBatch;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.statictopic.LogicQueueMappingItem;
import org.apache.rocketmq.remoting.protocol.statictopic.TopicQueueMappingDetail;

/**
 * Scenarios of Apache RocketMQ's remoting client 5.3.2 against the name server given:
 * {@code Scenarios53 <namesrvAddr> <scenario> <topic> <group> <count>}. One scenario a run:
 * <ul>
 *   <li>{@code litepull-subscribe}: a lite pull consumer (auto commit off) subscribes, polls every
 *       message, commits; a second consumer of the group then gets nothing;</li>
 *   <li>{@code litepull-assign-seek}: assign all queues, read them, seek to the beginning and to
 *       the middle of one queue, read again from there;</li>
 *   <li>{@code pop-server-rebalance} / {@code pull-server-rebalance}: two push consumers with
 *       {@code clientRebalance=false} take the queues the broker assigns (QUERY_ASSIGNMENT), the
 *       group switched to POP first (SET_MESSAGE_REQUEST_MODE) or left in the default PULL;</li>
 *   <li>{@code trace}: producer and push consumer with message traces on; the trace topic read
 *       back with a lite pull consumer;</li>
 *   <li>{@code autobatch}: a producer with {@code autoBatch} on, several threads sending with
 *       sync {@code send(msg)} at once (the client packs them into SEND_BATCH_MESSAGE requests; a
 *       send hook reports each batch); a lite pull consumer reads them back;</li>
 *   <li>{@code recall}: two timer messages (deliver time 5 s ahead, delay 8 s); the first recalled
 *       with its send result's recall handle (RECALL_MESSAGE) before it is due, the second
 *       consumed, then recalled too late;</li>
 *   <li>{@code compression}: bodies of about 8 KiB sent compressed with ZLIB, LZ4 and ZSTD
 *       ({@code setCompressType}), read back by a lite pull consumer;</li>
 *   <li>{@code request-reply}: {@code request(msg, callback, timeout)} answered by a push consumer
 *       of the same program replying with {@code MessageUtil.createReplyMessage}; then one sync
 *       {@code request(msg, timeout)}, which client 5.3.2 cannot complete;</li>
 *   <li>{@code acl}: producer and lite pull consumer signing every request with
 *       {@link AclClientRPCHook} ({@code -Dinterop.acl.user=accessKey:secretKey}, the admin
 *       requests with {@code -Dinterop.acl.admin}); then one send with a wrong secret and one
 *       unsigned, both refused.</li>
 * </ul>
 * Every event is a JSON line with "scenario" and "event"; the last one is "end" with the counts.
 * Short counts are reported, not thrown: the pytest side (tests/interop/test_java53_client.py)
 * asserts them. An unexpected exception is an "error" record and exit status 1. Bodies follow
 * {@link #body} (tests/interop/harness.py body() recomputes them); each wait is bounded by
 * {@code -Dinterop.timeout} seconds (default 60).
 */
public final class Scenarios53 {
    private static final long RPC_TIMEOUT = 5000;
    private static final String TRACE_TOPIC = TopicValidator.RMQ_SYS_TRACE_TOPIC;
    private static final long STARTED = System.currentTimeMillis();

    private final String namesrv;
    private final String scenario;
    private final String topic;
    private final String group;
    private final int count;
    private final long timeoutMillis = Long.getLong("interop.timeout", 60) * 1000;
    /** A started producer whose client instance sends the admin requests (rocketmq-tools 5.3.2 does not exist). */
    private DefaultMQProducer admin;
    /** What signs the admin client's requests, and the scenario's own clients' (acl), or null. */
    private final RPCHook adminHook = aclHook(System.getProperty("interop.acl.admin"));
    private final RPCHook clientHook = aclHook(System.getProperty("interop.acl.user"));

    private Scenarios53(String namesrv, String scenario, String topic, String group, int count) {
        this.namesrv = namesrv;
        this.scenario = scenario;
        this.topic = topic;
        this.group = group;
        this.count = count;
    }

    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: Scenarios53 <namesrvAddr> <scenario> <topic> <group> <count>");
            System.exit(2);
        }
        Scenarios53 run = new Scenarios53(args[0], args[1], args[2], args[3], Integer.parseInt(args[4]));
        int status = 0;
        long started = System.currentTimeMillis();
        run.record("begin").put("topic", run.topic).put("group", run.group).put("count", run.count).emit();
        try {
            run.admin = run.startProducer(run.group + "_admin", false, run.adminHook);
            run.scenario();
        } catch (Throwable e) {
            java.io.StringWriter trace = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(trace));
            run.record("error").put("error", trace.toString())
                .put("millis", System.currentTimeMillis() - started).emit();
            status = 1;
        } finally {
            if (run.admin != null) {
                run.admin.shutdown();
            }
        }
        System.exit(status);
    }

    private void scenario() throws Exception {
        switch (scenario) {
            case "litepull-subscribe": litePullSubscribe(); break;
            case "litepull-assign-seek": litePullAssignSeek(); break;
            case "pop-server-rebalance": serverRebalance(true); break;
            case "pull-server-rebalance": serverRebalance(false); break;
            case "trace": trace(); break;
            case "autobatch": autoBatch(); break;
            case "recall": recall(); break;
            case "compression": compression(); break;
            case "request-reply": requestReply(); break;
            case "static-topic": staticTopic(); break;
            case "acl": acl(); break;
            default: throw new IllegalArgumentException("unknown scenario " + scenario);
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

    static int size(int i) {
        return 60 + (i * 37) % 300;
    }

    static String sha256(byte[] data) throws Exception {
        byte[] digest = MessageDigest.getInstance("SHA-256").digest(data);
        StringBuilder hex = new StringBuilder();
        for (byte b : digest) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    /** A record of this scenario; "ms" is the time since the program started. */
    private Json record(String event) {
        return Json.of(event).put("scenario", scenario).put("ms", System.currentTimeMillis() - STARTED);
    }

    private long deadline() {
        return System.currentTimeMillis() + timeoutMillis;
    }

    private MQClientInstance adminClient() {
        return admin.getDefaultMQProducerImpl().getMqClientFactory();
    }

    private MQClientAPIImpl adminApi() {
        return adminClient().getMQClientAPIImpl();
    }

    /** An ACL 1.0 signer for "accessKey:secretKey", null for null. */
    private static RPCHook aclHook(String credentials) {
        if (credentials == null) {
            return null;
        }
        int colon = credentials.indexOf(':');
        return new AclClientRPCHook(
            new SessionCredentials(credentials.substring(0, colon), credentials.substring(colon + 1)));
    }

    private DefaultMQProducer startProducer(String producerGroup, boolean trace) throws Exception {
        return startProducer(producerGroup, trace, clientHook);
    }

    private DefaultMQProducer startProducer(String producerGroup, boolean trace, RPCHook hook) throws Exception {
        return start(newProducer(producerGroup, trace, hook));
    }

    private DefaultMQProducer newProducer(String producerGroup, boolean trace, RPCHook hook) {
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup, hook, trace, null);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(producerGroup);
        return producer;
    }

    private static DefaultMQProducer start(DefaultMQProducer producer) throws Exception {
        producer.start();
        return producer;
    }

    private DefaultLitePullConsumer litePull(String consumerGroup, String instance) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(consumerGroup, clientHook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setAutoCommit(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return consumer;
    }

    /** Creates the topic on every master and waits until the name server routes it; returns the masters. */
    private List<String> createTopic(String name, int queues) throws Exception {
        long until = deadline();
        List<String> masters = new ArrayList<>();
        if (Boolean.getBoolean("interop.topicsExist")) {
            // Created beforehand (through a proxy, the cluster's brokers are not reachable).
            awaitRoute(name, until, route -> !route.getQueueDatas().isEmpty());
            record("topic").put("topic", name).put("queues", queues).put("masters", masters).emit();
            return masters;
        }
        while (true) {
            ClusterInfo info = adminApi().getBrokerClusterInfo(RPC_TIMEOUT);
            for (BrokerData broker : info.getBrokerAddrTable().values()) {
                String master = broker.getBrokerAddrs().get(MixAll.MASTER_ID);
                if (master != null) {
                    masters.add(master);
                }
            }
            if (!masters.isEmpty()) {
                break;
            }
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException("no master broker registered with " + namesrv);
            }
            record("waiting").put("for", "a master in the cluster info").emit();
            Thread.sleep(200);
        }
        for (String master : masters) {
            adminApi().createTopic(master, TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC,
                new TopicConfig(name, queues, queues, 6), RPC_TIMEOUT);
        }
        awaitRoute(name, until, route -> route.getQueueDatas().size() >= masters.size());
        record("topic").put("topic", name).put("queues", queues).put("masters", masters).emit();
        return masters;
    }

    /** Waits until the name server's route of {@code name} is {@code ready}, or the deadline. */
    private void awaitRoute(String name, long until, java.util.function.Predicate<TopicRouteData> ready)
            throws Exception {
        while (true) {
            try {
                TopicRouteData route = adminApi().getTopicRouteInfoFromNameServer(name, RPC_TIMEOUT);
                if (route != null && ready.test(route)) {
                    return;
                }
            } catch (Exception e) {
                if (System.currentTimeMillis() > until) {
                    throw e;
                }
            }
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException("no route as awaited for " + name);
            }
            Thread.sleep(100);
        }
    }

    /**
     * Creates a static topic of {@code totalQueues} global queues dealt round-robin over the
     * masters (one mapping item each, as {@code mqadmin updateStaticTopic} makes them) with
     * UPDATE_AND_CREATE_STATIC_TOPIC, and waits until the route carries every broker's mapping.
     */
    private void createStaticTopic(String name, int totalQueues) throws Exception {
        long until = deadline();
        Map<String, String> masters = new TreeMap<>();
        while (masters.isEmpty()) {
            for (BrokerData broker : adminApi().getBrokerClusterInfo(RPC_TIMEOUT).getBrokerAddrTable().values()) {
                String master = broker.getBrokerAddrs().get(MixAll.MASTER_ID);
                if (master != null) {
                    masters.put(broker.getBrokerName(), master);
                }
            }
            if (masters.isEmpty()) {
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("no master broker registered with " + namesrv);
                }
                Thread.sleep(200);
            }
        }
        List<String> brokers = new ArrayList<>(masters.keySet());
        long epoch = System.currentTimeMillis();
        Map<String, TopicQueueMappingDetail> details = new TreeMap<>();
        Map<String, Integer> localQueues = new TreeMap<>();
        for (String broker : brokers) {
            details.put(broker, new TopicQueueMappingDetail(name, totalQueues, broker, epoch));
            localQueues.put(broker, 0);
        }
        for (int gid = 0; gid < totalQueues; gid++) {
            String broker = brokers.get(gid % brokers.size());
            int queue = localQueues.get(broker);
            localQueues.put(broker, queue + 1);
            List<LogicQueueMappingItem> items = new ArrayList<>();
            items.add(new LogicQueueMappingItem(0, queue, broker, 0, 0, -1, -1, -1));
            details.get(broker).getHostedQueues().put(gid, items);
        }
        for (String broker : brokers) {
            int queues = localQueues.get(broker);
            adminApi().createStaticTopic(masters.get(broker), TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC,
                new TopicConfig(name, queues, queues, 6), details.get(broker), false, RPC_TIMEOUT);
        }
        awaitRoute(name, until, route -> route.getTopicQueueMappingByBroker() != null
            && route.getTopicQueueMappingByBroker().size() == brokers.size());
        record("topic").put("topic", name).put("queues", totalQueues).put("masters", brokers).emit();
    }

    /** Message {@code i}: tag TagA, key "key-i", user properties idx and size, body {@link #body}. */
    private Message message(int i, int size) {
        Message msg = new Message(topic, "TagA", "key-" + i, body(scenario, i, size));
        msg.putUserProperty("idx", Integer.toString(i));
        msg.putUserProperty("size", Integer.toString(size));
        return msg;
    }

    private Json sent(int i, SendResult result) {
        return record("sent").put("i", i).put("status", result.getSendStatus().name())
            .put("msg_id", result.getMsgId()).put("offset_msg_id", result.getOffsetMsgId())
            .put("queue", result.getMessageQueue().getQueueId())
            .put("broker", result.getMessageQueue().getBrokerName())
            .put("offset", result.getQueueOffset()).put("region_id", result.getRegionId())
            .put("trace_on", result.isTraceOn());
    }

    /** Sends {@code count} messages (keys "key-i", user properties idx and size), reporting each. */
    private List<SendResult> produce(DefaultMQProducer producer) throws Exception {
        List<SendResult> results = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            SendResult result = producer.send(message(i, size(i)), RPC_TIMEOUT);
            results.add(result);
            sent(i, result).emit();
        }
        return results;
    }

    private void produce() throws Exception {
        DefaultMQProducer producer = startProducer(group + "_pg", false);
        try {
            produce(producer);
        } finally {
            producer.shutdown();
        }
    }

    private Json received(String consumer, MessageExt msg) throws Exception {
        return record("received").put("consumer", consumer).put("topic", msg.getTopic())
            .put("msg_id", msg.getMsgId()).put("queue", msg.getQueueId()).put("offset", msg.getQueueOffset())
            .put("broker", msg.getBrokerName()).put("idx", msg.getUserProperty("idx"))
            .put("size", msg.getUserProperty("size")).put("body_len", msg.getBody().length)
            .put("body_sha256", sha256(msg.getBody())).put("keys", msg.getKeys()).put("tags", msg.getTags())
            .put("reconsume_times", msg.getReconsumeTimes())
            .put("region", msg.getProperty("MSG_REGION")).put("trace_on", msg.getProperty("TRACE_ON"))
            .put("pop_ck", msg.getProperty("POP_CK") != null)
            .put("offset_msg_id", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId() : null).put("sys_flag", msg.getSysFlag())
            .put("store_size", msg.getStoreSize()).put("at", System.currentTimeMillis())
            .put("codec", msg.getUserProperty("codec")).put("compression",
                (msg.getSysFlag() & MessageSysFlag.COMPRESSION_TYPE_COMPARATOR) == 0
                    ? null : MessageSysFlag.getCompressionType(msg.getSysFlag()).name());
    }

    /** Polls until {@code want} messages came or the timeout; then keeps polling {@code settleMillis} for extras. */
    private List<MessageExt> pollUntil(DefaultLitePullConsumer consumer, String label, int want, long settleMillis)
            throws Exception {
        List<MessageExt> got = new ArrayList<>();
        long until = deadline();
        while (got.size() < want && System.currentTimeMillis() < until) {
            for (MessageExt msg : consumer.poll(500)) {
                received(label, msg).emit();
                got.add(msg);
            }
        }
        long settle = System.currentTimeMillis() + settleMillis;
        while (System.currentTimeMillis() < settle) {
            for (MessageExt msg : consumer.poll(200)) {
                received(label, msg).emit();
                got.add(msg);
            }
        }
        return got;
    }

    private static List<MessageQueue> sorted(Collection<MessageQueue> queues) {
        List<MessageQueue> list = new ArrayList<>(queues);
        list.sort(null);
        return list;
    }

    private static int duplicates(List<MessageExt> messages) {
        Set<String> ids = new HashSet<>();
        int dups = 0;
        for (MessageExt msg : messages) {
            if (!ids.add(msg.getMsgId())) {
                dups++;
            }
        }
        return dups;
    }

    private long maxOffset(MessageQueue mq) throws Exception {
        return adminClient().getMQAdminImpl().maxOffset(mq);
    }

    /** The group's offset of mq as the broker has it (QUERY_CONSUMER_OFFSET), -1 when it has none. */
    private long brokerOffset(String consumerGroup, MessageQueue mq) throws Exception {
        QueryConsumerOffsetRequestHeader header = new QueryConsumerOffsetRequestHeader();
        header.setConsumerGroup(consumerGroup);
        header.setTopic(mq.getTopic());
        header.setQueueId(mq.getQueueId());
        // A static topic's queues name a logical broker; the route says which broker leads each.
        String addr = adminClient().findBrokerAddressInPublish(adminClient().getBrokerNameFromMessageQueue(mq));
        try {
            return adminApi().queryConsumerOffset(addr, header, RPC_TIMEOUT);
        } catch (org.apache.rocketmq.client.exception.MQBrokerException e) {
            return -1;
        }
    }

    /** Each queue's offset of the group on the broker, once it reached the queue's end (10 s at most). */
    private void recordBrokerOffsets(List<MessageQueue> queues) throws Exception {
        long until = System.currentTimeMillis() + 10_000;
        for (MessageQueue mq : queues) {
            long want = maxOffset(mq);
            long offset = brokerOffset(group, mq);
            while (offset != want && System.currentTimeMillis() < until) {
                Thread.sleep(100);
                offset = brokerOffset(group, mq);
            }
            record("broker_offset").put("queue", mq.getQueueId()).put("broker", mq.getBrokerName())
                .put("offset", offset).put("max", want).emit();
        }
    }

    /**
     * commitSync() only records the offsets in the client: they reach the broker with the next
     * persist (every 5 s, and oneway at shutdown, which a closing connection can lose). Commit
     * until the broker holds every queue's end, so the scenario checks the broker's handling of
     * the commits rather than the timing of the client's oneway persist.
     */
    private void commitUntilStored(DefaultLitePullConsumer consumer, List<MessageQueue> queues) throws Exception {
        long until = System.currentTimeMillis() + 15_000;
        while (true) {
            consumer.commitSync();
            boolean stored = true;
            for (MessageQueue mq : queues) {
                stored &= brokerOffset(group, mq) == maxOffset(mq);
            }
            if (stored || System.currentTimeMillis() >= until) {
                record("commit").put("stored", stored).put("assigned", consumer.assignment().size()).emit();
                return;
            }
            Thread.sleep(250);
        }
    }

    // ---- scenarios ----------------------------------------------------------------------

    /**
     * Subscribe, poll all, commitSync, committed(mq) = the queue's max offset; then a second
     * consumer of the group (its own client instance) reads the broker's offsets and gets nothing.
     */
    private void litePullSubscribe() throws Exception {
        createTopic(topic, 4);
        produce();
        DefaultLitePullConsumer first = litePull(group, group + "_c1");
        first.subscribe(topic, "*");
        first.start();
        List<MessageExt> got;
        List<MessageQueue> queues;
        try {
            got = pollUntil(first, "c1", count, 500);
            first.commitSync();
            queues = sorted(first.fetchMessageQueues(topic));
            for (MessageQueue mq : queues) {
                record("committed").put("consumer", "c1").put("queue", mq.getQueueId())
                    .put("committed", first.committed(mq)).put("max", maxOffset(mq)).emit();
            }
            // Shutting down would persist them too, but oneway: a closing connection lost one
            // queue's update on Apache's broker (0 where 10 was committed), so commit until stored.
            commitUntilStored(first, queues);
        } finally {
            first.shutdown();
        }
        recordBrokerOffsets(queues);

        DefaultLitePullConsumer second = litePull(group, group + "_c2");
        second.subscribe(topic, "*");
        second.start();
        List<MessageExt> again;
        int assigned;
        try {
            // Nothing is expected: poll a few seconds once the queues were assigned.
            long assignUntil = deadline();
            while (second.assignment().size() < queues.size() && System.currentTimeMillis() < assignUntil) {
                second.poll(100);
            }
            assigned = second.assignment().size();
            again = pollUntil(second, "c2", 0, 4000);
            for (MessageQueue mq : queues) {
                record("committed").put("consumer", "c2").put("queue", mq.getQueueId())
                    .put("committed", second.committed(mq)).put("max", maxOffset(mq)).emit();
            }
        } finally {
            second.shutdown();
        }
        record("end").put("received", got.size()).put("duplicates", duplicates(got))
            .put("second_assigned", assigned).put("second_received", again.size()).emit();
    }

    /**
     * A static topic (RocketMQ 5's logic queues): the producer sends to global queues, a lite-pull
     * consumer reads every message back and commits, and the broker holds the commit per global
     * queue at the queue's end.
     */
    private void staticTopic() throws Exception {
        createStaticTopic(topic, 4);
        produce();
        DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
        consumer.subscribe(topic, "*");
        consumer.start();
        List<MessageExt> got;
        List<MessageQueue> queues;
        try {
            got = pollUntil(consumer, "c1", count, 500);
            queues = sorted(consumer.fetchMessageQueues(topic));
            commitUntilStored(consumer, queues);
        } finally {
            consumer.shutdown();
        }
        recordBrokerOffsets(queues);
        record("end").put("received", got.size()).put("duplicates", duplicates(got)).emit();
    }

    /**
     * Assign every queue and read them all; seek every queue to its beginning and read them all
     * again; seek the fullest queue to its middle and read from there.
     */
    private void litePullAssignSeek() throws Exception {
        createTopic(topic, 4);
        produce();
        DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
        consumer.start();
        try {
            List<MessageQueue> queues = sorted(consumer.fetchMessageQueues(topic));
            consumer.assign(queues);
            // assign() starts a pull at once. A seek while a pull that found messages is in flight
            // can deliver that pull's batch after the seek (5.3.2 drops it only while the seek
            // offset is still unconsumed), so seek only once everything was read and each queue's
            // pull is parked in a long poll at the end.
            List<MessageExt> assigned = pollUntil(consumer, "assign", count, 500);
            for (MessageQueue mq : queues) {
                consumer.seekToBegin(mq);
            }
            List<MessageExt> fromBegin = pollUntil(consumer, "begin", count, 500);

            MessageQueue fullest = queues.get(0);
            for (MessageQueue mq : queues) {
                if (maxOffset(mq) > maxOffset(fullest)) {
                    fullest = mq;
                }
            }
            long max = maxOffset(fullest);
            long middle = max / 2;
            consumer.seek(fullest, middle);
            record("seek").put("queue", fullest.getQueueId()).put("offset", middle).put("max", max).emit();
            List<MessageExt> fromMiddle = pollUntil(consumer, "middle", (int) (max - middle), 1500);
            record("end").put("received", assigned.size()).put("begin_received", fromBegin.size())
                .put("middle_queue", fullest.getQueueId()).put("middle_from", middle)
                .put("middle_expected", max - middle).put("middle_received", fromMiddle.size())
                .put("duplicates", duplicates(assigned) + duplicates(fromBegin) + duplicates(fromMiddle)).emit();
        } finally {
            consumer.shutdown();
        }
    }

    /**
     * Two push consumers with clientRebalance=false: the broker assigns the queues
     * (QUERY_ASSIGNMENT). In POP mode (set with SET_MESSAGE_REQUEST_MODE first) each pops every
     * queue (queue id -1) and acks; in PULL mode they split the queues. Every message once.
     */
    private void serverRebalance(boolean pop) throws Exception {
        List<String> masters = createTopic(topic, 4);
        long invisibleMillis = 10_000;
        if (pop) {
            for (String master : masters) {
                adminApi().setMessageRequestMode(master, topic, group, MessageRequestMode.POP, 0, RPC_TIMEOUT);
            }
            record("mode").put("mode", "POP").put("pop_share_queue_num", 0).emit();
        }
        Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        AtomicInteger received = new AtomicInteger();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        try {
            for (String name : new String[] {"c1", "c2"}) {
                DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
                consumer.setNamesrvAddr(namesrv);
                consumer.setInstanceName(group + "_" + name);
                consumer.setClientRebalance(false);
                consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                consumer.setPopInvisibleTime(invisibleMillis);
                consumer.subscribe(topic, "*");
                consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                    for (MessageExt msg : msgs) {
                        try {
                            received(name, msg).emit();
                        } catch (Exception e) {
                            throw new IllegalStateException(e);
                        }
                        seen.computeIfAbsent(msg.getMsgId(), k -> new AtomicInteger()).incrementAndGet();
                        received.incrementAndGet();
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                consumer.start();
                consumers.add(consumer);
            }
            Map<String, List<Integer>> assignment = awaitAssignment(consumers, pop);
            record("assignment").put("mode", pop ? "POP" : "PULL").put("queues", assignment).emit();

            produce();
            long until = deadline();
            while (received.get() < count && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
            // Watch for redeliveries: in POP mode a message not acked comes back after the invisible time.
            Thread.sleep(pop ? invisibleMillis + 2000 : 2000);
        } finally {
            for (DefaultMQPushConsumer consumer : consumers) {
                consumer.shutdown();
            }
        }
        int duplicates = 0;
        for (AtomicInteger times : seen.values()) {
            duplicates += times.get() - 1;
        }
        record("end").put("mode", pop ? "POP" : "PULL").put("received", received.get())
            .put("unique", seen.size()).put("duplicates", duplicates).emit();
    }

    /**
     * The topic's queue ids each consumer was assigned (pop or pull), once every consumer has some
     * (pull: and together exactly the queues the route lists, counted per broker: through a proxy
     * in front of two brokers a topic of 2 queues has 4). Then each sends a heartbeat: an
     * assignment raises the subscription's version, and the heartbeat that tells the broker is
     * skipped when another one holds the client's heartbeat lock ("lock heartBeat, but failed"),
     * after which the broker refuses pulls as SUBSCRIPTION_NOT_LATEST until the next periodic
     * heartbeat, up to 30 s later (client 5.3.2). The queues are in place a moment before the
     * version is raised, so a heartbeat sent in between is sent again.
     */
    private Map<String, List<Integer>> awaitAssignment(List<DefaultMQPushConsumer> consumers, boolean pop)
            throws Exception {
        Map<String, List<Integer>> owned = assignment(consumers, pop, routedQueues());
        for (DefaultMQPushConsumer consumer : consumers) {
            SubscriptionData subscription =
                consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getSubscriptionInner().get(topic);
            long until = System.currentTimeMillis() + 5000;
            long told;
            do {
                told = subscription.getSubVersion();
                heartbeat(consumer.getDefaultMQPushConsumerImpl().getmQClientFactory(), until);
            } while (subscription.getSubVersion() != told && System.currentTimeMillis() < until);
        }
        return owned;
    }

    /** One heartbeat to every broker, retried while another holds the client's lock, until {@code until}. */
    private static void heartbeat(MQClientInstance client, long until) throws InterruptedException {
        while (!client.sendHeartbeatToAllBrokerWithLock() && System.currentTimeMillis() < until) {
            Thread.sleep(50);
        }
    }

    /** The topic's read queues over every broker its route lists. */
    private int routedQueues() throws Exception {
        int total = 0;
        for (QueueData queues : adminApi().getTopicRouteInfoFromNameServer(topic, RPC_TIMEOUT).getQueueDatas()) {
            total += queues.getReadQueueNums();
        }
        return total;
    }

    private Map<String, List<Integer>> assignment(List<DefaultMQPushConsumer> consumers, boolean pop, int queues)
            throws InterruptedException {
        Map<String, List<Integer>> owned = new TreeMap<>();
        long until = deadline();
        while (true) {
            owned.clear();
            Set<MessageQueue> union = new HashSet<>();
            int total = 0;
            boolean everyone = true;
            for (int n = 0; n < consumers.size(); n++) {
                RebalanceImpl rebalance = consumers.get(n).getDefaultMQPushConsumerImpl().getRebalanceImpl();
                Set<MessageQueue> taken = new HashSet<>(pop
                    ? rebalance.getPopProcessQueueTable().keySet() : rebalance.getProcessQueueTable().keySet());
                List<Integer> ids = new ArrayList<>();
                for (MessageQueue mq : taken) {
                    if (mq.getTopic().equals(topic)) {
                        ids.add(mq.getQueueId());
                        union.add(mq);
                    }
                }
                ids.sort(null);
                owned.put("c" + (n + 1), ids);
                total += ids.size();
                everyone &= !ids.isEmpty();
            }
            boolean settled = pop ? everyone : everyone && union.size() == queues && total == queues;
            if (settled || System.currentTimeMillis() > until) {
                return owned;
            }
            Thread.sleep(100);
        }
    }

    /**
     * A traced producer and push consumer; while both still run, the trace topic is read from its
     * start with a lite pull consumer of a new group until every message has its Pub, SubBefore
     * and SubAfter records. (Their trace dispatchers send a batch within half a second; the
     * flush on shutdown gives up after 500 ms and then shuts the trace producer down, so on a
     * busy machine traces still queued then would be lost.)
     */
    private void trace() throws Exception {
        createTopic(topic, 2);
        AtomicInteger received = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, true, null);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "_c1");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                try {
                    received("c1", msg).emit();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                received.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQProducer producer = startProducer(group + "_pg", true);
        DefaultLitePullConsumer reader = litePull(group + "_trace_reader", group + "_trace_reader");
        Map<String, Map<String, Integer>> kinds = new TreeMap<>();
        int traceMessages = 0;
        try {
            consumer.start();
            awaitAssignment(List.of(consumer), false);
            for (SendResult result : produce(producer)) {
                kinds.put(result.getMsgId(), new TreeMap<>());
            }
            long until = deadline();
            while (received.get() < count && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
            reader.start();
            reader.assign(sorted(reader.fetchMessageQueues(TRACE_TOPIC)));
            while (!complete(kinds) && System.currentTimeMillis() < until) {
                for (MessageExt msg : reader.poll(500)) {
                    traceMessages++;
                    for (TraceContext context : TraceDataEncoder.decoderFromTraceDataString(
                            new String(msg.getBody(), StandardCharsets.UTF_8))) {
                        for (TraceBean bean : context.getTraceBeans()) {
                            if (kinds.containsKey(bean.getMsgId())) {
                                emitTrace(context, bean, msg, kinds);
                            }
                        }
                    }
                }
            }
        } finally {
            reader.shutdown();
            consumer.shutdown();
            producer.shutdown();
        }
        Map<String, Object> perMessage = new TreeMap<>(kinds);
        record("end").put("received", received.get()).put("trace_messages", traceMessages)
            .put("traces", perMessage).emit();
    }

    private void emitTrace(TraceContext context, TraceBean bean, MessageExt traceMsg,
            Map<String, Map<String, Integer>> kinds) {
        String type = context.getTraceType().name();
        kinds.get(bean.getMsgId()).merge(type, 1, Integer::sum);
        // "keyed": the message id is among the trace message's keys, which is how a trace is
        // found by id (mqadmin queryMsgTraceById).
        record("trace").put("type", type).put("msg_id", bean.getMsgId())
            .put("group", context.getGroupName()).put("region_id", context.getRegionId())
            .put("success", context.isSuccess()).put("topic", bean.getTopic())
            .put("tags", bean.getTags()).put("keys", bean.getKeys())
            .put("offset_msg_id", bean.getOffsetMsgId()).put("request_id", context.getRequestId())
            .put("trace_queue", traceMsg.getQueueId()).put("trace_offset", traceMsg.getQueueOffset())
            .put("keyed", traceMsg.getKeys() != null
                && List.of(traceMsg.getKeys().split(" ")).contains(bean.getMsgId())).emit();
    }

    private static boolean complete(Map<String, Map<String, Integer>> kinds) {
        for (Map<String, Integer> seen : kinds.values()) {
            if (!seen.keySet().containsAll(List.of("Pub", "SubBefore", "SubAfter"))) {
                return false;
            }
        }
        return true;
    }

    /**
     * A producer with autoBatch on: five threads each send their share of the messages
     * with a sync {@code send(msg)} at the same time, and the client packs the messages waiting
     * together into one SEND_BATCH_MESSAGE; a send hook reports each batch (its own UNIQ_KEY and
     * the messages in it). Then a lite pull consumer reads every message back.
     */
    private void autoBatch() throws Exception {
        final int threads = 5;
        createTopic(topic, 4);
        DefaultMQProducer producer = newProducer(group + "_pg", false, clientHook);
        producer.setAutoBatch(true);
        producer.batchMaxDelayMs(100);
        producer.batchMaxBytes(1024);
        producer.setSendMsgTimeout((int) RPC_TIMEOUT);
        producer.getDefaultMQProducerImpl().registerSendMessageHook(new SendMessageHook() {
            @Override
            public String hookName() {
                return "interop-batches";
            }

            @Override
            public void sendMessageBefore(SendMessageContext context) {
                Message msg = context.getMessage();
                if (!(msg instanceof MessageBatch)) {
                    record("direct").put("idx", msg.getUserProperty("idx")).emit();
                    return;
                }
                List<Integer> idx = new ArrayList<>();
                List<String> ids = new ArrayList<>();
                for (Message inner : (MessageBatch) msg) {
                    idx.add(Integer.parseInt(inner.getUserProperty("idx")));
                    ids.add(MessageClientIDSetter.getUniqID(inner));
                }
                record("batch").put("batch_id", MessageClientIDSetter.getUniqID(msg)).put("idx", idx)
                    .put("ids", ids).put("keys", msg.getKeys()).put("tags", msg.getTags()).emit();
            }

            @Override
            public void sendMessageAfter(SendMessageContext context) {
            }
        });
        start(producer);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            CountDownLatch go = new CountDownLatch(1);
            List<Future<Void>> done = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int thread = t;
                done.add(pool.submit(() -> {
                    go.await();
                    for (int i = thread; i < count; i += threads) {
                        sent(i, producer.send(message(i, size(i)))).put("thread", thread).emit();
                    }
                    return null;
                }));
            }
            go.countDown();
            for (Future<Void> future : done) {
                future.get(timeoutMillis, TimeUnit.MILLISECONDS);
            }
        } finally {
            pool.shutdownNow();
            producer.shutdown();
        }
        DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
        consumer.subscribe(topic, "*");
        consumer.start();
        List<MessageExt> got;
        try {
            got = pollUntil(consumer, "c1", count, 1000);
        } finally {
            consumer.shutdown();
        }
        record("end").put("received", got.size()).emit();
    }

    /**
     * Two timer messages: the first with a deliver time 5 s ahead, the second with a delay of 8 s.
     * The first is recalled (RECALL_MESSAGE with its send result's recall handle) at once; a lite
     * pull consumer then reads until 3 s after the second was due. Last, the second is recalled
     * once delivered, which the broker refuses.
     */
    private void recall() throws Exception {
        createTopic(topic, 2);
        DefaultMQProducer producer = startProducer(group + "_pg", false);
        long[] due = new long[2];
        String[] handles = new String[2];
        try {
            for (int i = 0; i < 2; i++) {
                Message msg = message(i, size(i));
                if (i == 0) {
                    due[i] = System.currentTimeMillis() + 5000;
                    msg.setDeliverTimeMs(due[i]);
                } else {
                    due[i] = System.currentTimeMillis() + 8000;
                    msg.setDelayTimeMs(8000);
                }
                SendResult result = producer.send(msg, RPC_TIMEOUT);
                handles[i] = result.getRecallHandle();
                sent(i, result).put("recall_handle", handles[i]).put("due", due[i]).emit();
            }
            if (handles[0] != null) {
                String recalled = producer.recallMessage(topic, handles[0]);
                record("recalled").put("i", 0).put("msg_id", recalled)
                    .put("before_due_ms", due[0] - System.currentTimeMillis()).emit();
            }
            DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
            consumer.subscribe(topic, "*");
            consumer.start();
            List<MessageExt> got = new ArrayList<>();
            try {
                long until = deadline();
                long settle = due[1] + 3000;
                while (System.currentTimeMillis() < until
                        && (System.currentTimeMillis() < settle || got.isEmpty())) {
                    for (MessageExt msg : consumer.poll(200)) {
                        received("c1", msg).emit();
                        got.add(msg);
                    }
                }
            } finally {
                consumer.shutdown();
            }
            if (handles[1] != null) {
                try {
                    String late = producer.recallMessage(topic, handles[1]);
                    record("late_recall").put("i", 1).put("msg_id", late).put("code", 0).emit();
                } catch (MQBrokerException e) {
                    record("late_recall").put("i", 1).put("code", e.getResponseCode())
                        .put("remark", e.getErrorMessage()).emit();
                }
            }
            record("end").put("received", got.size()).emit();
        } finally {
            producer.shutdown();
        }
    }

    /**
     * Bodies of about 8 KiB sent compressed (over 1 KiB), each message with the next of ZLIB, LZ4
     * and ZSTD ({@code setCompressType}); a lite pull consumer reads them back (the client
     * inflates each by the compression type in its sysFlag).
     */
    private void compression() throws Exception {
        CompressionType[] codecs = {CompressionType.ZLIB, CompressionType.LZ4, CompressionType.ZSTD};
        createTopic(topic, 2);
        DefaultMQProducer producer = newProducer(group + "_pg", false, clientHook);
        producer.setCompressMsgBodyOverHowmuch(1024);
        start(producer);
        try {
            for (int i = 0; i < count; i++) {
                CompressionType codec = codecs[i % codecs.length];
                producer.setCompressType(codec);
                int size = 8 * 1024 + i * 97;
                Message msg = message(i, size);
                msg.putUserProperty("codec", codec.name());
                sent(i, producer.send(msg, RPC_TIMEOUT)).put("codec", codec.name()).put("size", size).emit();
            }
        } finally {
            producer.shutdown();
        }
        DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
        consumer.subscribe(topic, "*");
        consumer.start();
        List<MessageExt> got;
        try {
            got = pollUntil(consumer, "c1", count, 500);
        } finally {
            consumer.shutdown();
        }
        record("end").put("received", got.size()).emit();
    }

    /**
     * A replier (push consumer of the topic answering each request with
     * {@code MessageUtil.createReplyMessage} through its own producer; SEND_REPLY_MESSAGE_V2) and a
     * requester: the broker pushes each reply to the requester's channel
     * (PUSH_REPLY_MESSAGE_TO_CLIENT), which it knows from the requester's heartbeat, so the
     * requester heartbeats once it has the topic's route. Each request in turn with
     * {@code request(msg, callback, timeout)}, whose callback client 5.3.2 calls twice: with null
     * once the request is stored (Apache #4313), then with the reply. Last, one request with the
     * sync {@code request(msg, timeout)}, which in client 5.3.2 stops waiting as soon as the
     * request is stored (its send callback counts the reply latch down: Apache #8272, undone by
     * #9608 after 5.3.3) and throws RequestTimeoutException whatever the broker does.
     */
    private void requestReply() throws Exception {
        createTopic(topic, 2);
        DefaultMQProducer replyProducer = startProducer(group + "_reply_pg", false);
        DefaultMQPushConsumer replier = new DefaultMQPushConsumer(group, clientHook);
        replier.setNamesrvAddr(namesrv);
        replier.setInstanceName(group + "_replier");
        replier.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        replier.subscribe(topic, "*");
        AtomicInteger replied = new AtomicInteger();
        replier.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                int idx = Integer.parseInt(msg.getUserProperty("idx"));
                int size = Integer.parseInt(msg.getUserProperty("size"));
                try {
                    received("replier", msg).emit();
                    Message reply = MessageUtil.createReplyMessage(msg, body(scenario + "-reply", idx, size));
                    reply.putUserProperty("idx", Integer.toString(idx));
                    reply.putUserProperty("size", Integer.toString(size));
                    SendResult result = replyProducer.send(reply, RPC_TIMEOUT);
                    record("replied").put("idx", idx).put("status", result.getSendStatus().name())
                        .put("reply_topic", reply.getTopic())
                        .put("correlation_id", msg.getProperty(MessageConst.PROPERTY_CORRELATION_ID))
                        .put("reply_to", msg.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT))
                        .put("ttl", msg.getProperty(MessageConst.PROPERTY_MESSAGE_TTL)).emit();
                } catch (Exception e) {
                    java.io.StringWriter trace = new java.io.StringWriter();
                    e.printStackTrace(new java.io.PrintWriter(trace));
                    record("reply_failed").put("idx", idx).put("error", trace.toString()).emit();
                }
                replied.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQProducer requester = startProducer(group + "_pg", false);
        int replies = 0;
        try {
            replier.start();
            awaitAssignment(List.of(replier), false);
            requester.fetchPublishMessageQueues(topic);
            long until = System.currentTimeMillis() + 5000;
            heartbeat(requester.getDefaultMQProducerImpl().getMqClientFactory(), until);
            for (int i = 0; i < count; i++) {
                Message msg = message(i, size(i));
                long started = System.currentTimeMillis();
                CompletableFuture<Message> answer = new CompletableFuture<>();
                AtomicInteger nulls = new AtomicInteger();
                requester.request(msg, new RequestCallback() {
                    @Override
                    public void onSuccess(Message reply) {
                        // Client 5.3.2 also calls this once the request is stored, with no reply.
                        if (reply == null) {
                            nulls.incrementAndGet();
                        } else {
                            answer.complete(reply);
                        }
                    }

                    @Override
                    public void onException(Throwable e) {
                        answer.completeExceptionally(e);
                    }
                }, 10_000);
                Message reply;
                try {
                    reply = answer.get(15, TimeUnit.SECONDS);
                } catch (Exception e) {
                    record("request_failed").put("i", i).put("error", e.toString())
                        .put("correlation_id", msg.getProperty(MessageConst.PROPERTY_CORRELATION_ID)).emit();
                    break;
                }
                replies++;
                record("reply").put("i", i).put("millis", System.currentTimeMillis() - started)
                    .put("null_callbacks", nulls.get())
                    .put("correlation_id", msg.getProperty(MessageConst.PROPERTY_CORRELATION_ID))
                    .put("reply_correlation_id", reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID))
                    .put("msg_type", reply.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE))
                    .put("reply_to", reply.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT))
                    .put("topic", reply.getTopic()).put("idx", reply.getUserProperty("idx"))
                    .put("size", reply.getUserProperty("size")).put("body_len", reply.getBody().length)
                    .put("body_sha256", sha256(reply.getBody())).emit();
            }
            // The sync request(msg, timeout) of client 5.3.2.
            Message msg = message(count, size(count));
            long started = System.currentTimeMillis();
            try {
                Message reply = requester.request(msg, 10_000);
                record("sync_request").put("outcome", "reply").put("millis", System.currentTimeMillis() - started)
                    .put("idx", reply.getUserProperty("idx")).emit();
            } catch (RequestTimeoutException e) {
                record("sync_request").put("outcome", "RequestTimeoutException")
                    .put("millis", System.currentTimeMillis() - started).put("error", e.getMessage()).emit();
            }
            // Its request is answered all the same: wait until the replier has answered it too.
            until = deadline();
            while (replied.get() < count + 1 && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
        } finally {
            requester.shutdown();
            replier.shutdown();
            replyProducer.shutdown();
        }
        record("end").put("replies", replies).put("replied", replied.get())
            .put("client_id", requester.buildMQClientId()).emit();
    }

    /**
     * ACL 1.0 signatures: the topic created by the admin account, then a producer and a lite pull
     * consumer signed with the user's account send and read every message; a send signed with a
     * wrong secret and an unsigned one are refused, and the broker stored only the signed ones.
     */
    private void acl() throws Exception {
        createTopic(topic, 4);
        DefaultMQProducer producer = startProducer(group + "_pg", false);
        try {
            produce(producer);
        } finally {
            producer.shutdown();
        }
        DefaultLitePullConsumer consumer = litePull(group, group + "_c1");
        consumer.subscribe(topic, "*");
        consumer.start();
        List<MessageExt> got;
        try {
            got = pollUntil(consumer, "c1", count, 500);
        } finally {
            consumer.shutdown();
        }
        String user = System.getProperty("interop.acl.user");
        refusedSend("wrong_secret", aclHook(user.substring(0, user.indexOf(':')) + ":not-the-secret"));
        refusedSend("unsigned", null);
        long stored = 0;
        for (MessageQueue mq : admin.fetchPublishMessageQueues(topic)) {
            stored += maxOffset(mq);
        }
        record("end").put("received", got.size()).put("stored", stored).emit();
    }

    /** One send (no retry) by a producer signing with {@code hook}; reports the broker's refusal. */
    private void refusedSend(String label, RPCHook hook) throws Exception {
        DefaultMQProducer producer = newProducer(group + "_" + label, false, hook);
        producer.setRetryTimesWhenSendFailed(0);
        start(producer);
        try {
            SendResult result = producer.send(message(count, size(count)), RPC_TIMEOUT);
            record("refused").put("who", label).put("sent", true).put("status", result.getSendStatus().name())
                .emit();
        } catch (Exception e) {
            Throwable cause = e;
            while (cause != null && !(cause instanceof MQBrokerException)) {
                cause = cause.getCause();
            }
            Json refusal = record("refused").put("who", label).put("sent", false);
            if (cause != null) {
                MQBrokerException refused = (MQBrokerException) cause;
                refusal.put("code", refused.getResponseCode()).put("remark", refused.getErrorMessage());
            } else {
                refusal.put("code", -1).put("remark", e.toString());
            }
            refusal.emit();
        } finally {
            producer.shutdown();
        }
    }
}
