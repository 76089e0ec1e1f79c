package interopspring;

import interop.Json;
import java.io.InputStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.core.env.SimpleCommandLinePropertySource;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;

/**
 * Apache's rocketmq-spring-boot-starter against the name server given, as a Spring Boot
 * application would use it: {@code SpringInterop --rocketmq.name-server=ADDR --interop.topic=T
 * --interop.group=G [--interop.sync=N] [--interop.async=M]}.
 * <ol>
 *   <li>the topic is created first (4 queues on every master, UPDATE_AND_CREATE_TOPIC through the
 *       starter's own remoting client), as an operator would before deploying the application;</li>
 *   <li>the Spring context starts: the starter's auto-configuration builds the RocketMQTemplate
 *       (producer, and the lite pull consumer of {@code rocketmq.pull-consumer.*}) and the
 *       {@link PushListener} container;</li>
 *   <li>{@code syncSend} N messages, then {@code asyncSend} M more, tagged TagA / TagB in turn,
 *       keyed "key-i", the index in the header "idx" (a user property on the wire);</li>
 *   <li>{@code receive(MessageExt.class)} (LITE_PULL_MESSAGE) until it has every message, and the
 *       push listener likewise.</li>
 * </ol>
 * Every event is a JSON line with "scenario" ("spring") and "event"; the last is "end" with the
 * counts. Short counts are reported, not thrown: tests/interop/test_spring_starter.py asserts them.
 * An unexpected exception is an "error" record and exit status 1. Bodies follow {@link #body}
 * (tests/interop/harness.py body() recomputes them); each wait is bounded by
 * {@code -Dinterop.timeout} seconds (default 60).
 */
@SpringBootApplication
public class SpringInterop {
    static final String SCENARIO = "spring";
    private static final long RPC_TIMEOUT = 5000;
    private static final long STARTED = System.currentTimeMillis();
    private static final long TIMEOUT_MILLIS = Long.getLong("interop.timeout", 60) * 1000;

    public static void main(String[] args) {
        SimpleCommandLinePropertySource cli = new SimpleCommandLinePropertySource(args);
        String namesrv = required(cli, "rocketmq.name-server");
        String topic = required(cli, "interop.topic");
        int sync = Integer.parseInt(cli.getProperty("interop.sync") == null ? "6" : cli.getProperty("interop.sync"));
        int async = Integer.parseInt(cli.getProperty("interop.async") == null ? "4" : cli.getProperty("interop.async"));
        record("begin").put("topic", topic).put("group", cli.getProperty("interop.group"))
            .put("sync", sync).put("async", async)
            .put("spring_boot", SpringBootVersion.getVersion())
            .put("starter", starterVersion())
            .put("client", MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION)).emit();
        int status = 0;
        ConfigurableApplicationContext context = null;
        try {
            createTopic(namesrv, topic, 4);
            context = SpringApplication.run(SpringInterop.class, args);
            record("context").put("millis", System.currentTimeMillis() - STARTED).emit();
            run(context, topic, sync, async);
        } catch (Throwable e) {
            StringWriter trace = new StringWriter();
            e.printStackTrace(new PrintWriter(trace));
            record("error").put("error", trace.toString()).emit();
            status = 1;
        } finally {
            if (context != null) {
                SpringApplication.exit(context);
            }
        }
        record("exit").put("status", status).emit();
        System.exit(status);
    }

    private static String required(SimpleCommandLinePropertySource cli, String name) {
        String value = cli.getProperty(name);
        if (value == null) {
            System.err.println("usage: SpringInterop --rocketmq.name-server=ADDR --interop.topic=T --interop.group=G");
            System.exit(2);
        }
        return value;
    }

    private static void run(ConfigurableApplicationContext context, String topic, int sync, int async)
        throws Exception {
        RocketMQTemplate template = context.getBean(RocketMQTemplate.class);
        PushListener listener = context.getBean(PushListener.class);
        DefaultLitePullConsumer pull = template.getConsumer();
        record("template")
            .put("producer_group", template.getProducer().getProducerGroup())
            .put("pull_group", pull.getConsumerGroup())
            .put("pull_model", pull.getMessageModel().name())
            .put("pull_consume_from", pull.getConsumeFromWhere().name())
            .put("pull_auto_commit", pull.isAutoCommit()).emit();
        int total = sync + async;

        for (int i = 0; i < sync; i++) {
            SendResult result = template.syncSend(destination(topic, i), message(i), RPC_TIMEOUT);
            sent("sync", i, result);
        }
        CountDownLatch acked = new CountDownLatch(async);
        for (int i = sync; i < total; i++) {
            final int idx = i;
            template.asyncSend(destination(topic, i), message(i), new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    sent("async", idx, result);
                    acked.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    record("send_failed").put("style", "async").put("i", idx).put("error", e.toString()).emit();
                    acked.countDown();
                }
            }, RPC_TIMEOUT);
        }
        boolean allAcked = acked.await(TIMEOUT_MILLIS, TimeUnit.MILLISECONDS);

        // RocketMQTemplate.receive: DefaultLitePullConsumer.poll, converted to the class asked for.
        Set<String> pulled = new HashSet<>();
        int pulledDeliveries = 0;
        int emptyPolls = 0;
        long until = System.currentTimeMillis() + TIMEOUT_MILLIS;
        while (pulled.size() < total && System.currentTimeMillis() < until) {
            List<MessageExt> batch = template.receive(MessageExt.class);
            if (batch.isEmpty()) {
                emptyPolls++;
            }
            for (MessageExt message : batch) {
                pulledDeliveries++;
                pulled.add(message.getUserProperty("idx"));
                received("litepull", message);
            }
        }
        // One more, shorter poll: nothing beyond the messages sent (no redelivery).
        for (MessageExt message : template.receive(MessageExt.class, 1000)) {
            pulledDeliveries++;
            pulled.add(message.getUserProperty("idx"));
            received("litepull", message);
        }

        until = System.currentTimeMillis() + TIMEOUT_MILLIS;
        while (listener.unique() < total && System.currentTimeMillis() < until) {
            Thread.sleep(50);
        }
        Thread.sleep(500); // a late duplicate would show in the counts
        record("end").put("sent", total).put("async_acked", allAcked)
            .put("litepull_unique", pulled.size()).put("litepull_deliveries", pulledDeliveries)
            .put("litepull_empty_polls", emptyPolls)
            .put("push_unique", listener.unique()).put("push_deliveries", listener.deliveries())
            .put("millis", System.currentTimeMillis() - STARTED).emit();
    }

    // ---- messages ---------------------------------------------------------------------------

    static String tag(int i) {
        return i % 2 == 0 ? "TagA" : "TagB";
    }

    static String destination(String topic, int i) {
        return topic + ":" + tag(i);
    }

    static Message<String> message(int i) {
        return MessageBuilder.withPayload(new String(body(SCENARIO, i, size(i)), StandardCharsets.UTF_8))
            .setHeader(RocketMQHeaders.KEYS, "key-" + i)
            .setHeader("idx", Integer.toString(i))
            .build();
    }

    /** The body of message {@code i}: "scenario:i;" repeated up to {@code size} bytes (ASCII). */
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

    static String sha256(byte[] data) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(data);
            StringBuilder hex = new StringBuilder();
            for (byte b : digest) {
                hex.append(String.format("%02x", b));
            }
            return hex.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    // ---- records ----------------------------------------------------------------------------

    /** A record of this program; "ms" is the time since it started. */
    static Json record(String event) {
        return Json.of(event).put("scenario", SCENARIO).put("ms", System.currentTimeMillis() - STARTED);
    }

    static void sent(String style, int i, SendResult result) {
        record("sent").put("style", style).put("i", i).put("status", result.getSendStatus().name())
            .put("msg_id", result.getMsgId()).put("offset_msg_id", result.getOffsetMsgId())
            .put("queue", result.getMessageQueue().getQueueId())
            .put("broker", result.getMessageQueue().getBrokerName())
            .put("offset", result.getQueueOffset()).emit();
    }

    static void received(String style, MessageExt message) {
        byte[] data = message.getBody();
        record("received").put("style", style)
            .put("idx", message.getUserProperty("idx"))
            .put("msg_id", message.getMsgId())
            .put("topic", message.getTopic())
            .put("keys", message.getKeys())
            .put("tags", message.getTags())
            .put("queue", message.getQueueId())
            .put("offset", message.getQueueOffset())
            .put("reconsume_times", message.getReconsumeTimes())
            .put("body_len", data == null ? -1 : data.length)
            .put("body_sha256", data == null ? "" : sha256(data))
            .put("thread", Thread.currentThread().getName())
            .emit();
    }

    private static String starterVersion() {
        String path = "META-INF/maven/org.apache.rocketmq/rocketmq-spring-boot/pom.properties";
        try (InputStream in = RocketMQTemplate.class.getClassLoader().getResourceAsStream(path)) {
            Properties props = new Properties();
            if (in != null) {
                props.load(in);
            }
            return props.getProperty("version", "unknown");
        } catch (Exception e) {
            return "unknown";
        }
    }

    // ---- the topic --------------------------------------------------------------------------

    /** Creates the topic on every master (a plain producer's client instance sends the requests)
     * and waits until the name server routes it. */
    private static void createTopic(String namesrv, String topic, int queues) throws Exception {
        DefaultMQProducer admin = new DefaultMQProducer("interop_spring_admin");
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("interop_spring_admin");
        admin.start();
        try {
            MQClientAPIImpl api = admin.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
            long until = System.currentTimeMillis() + TIMEOUT_MILLIS;
            List<String> masters = new ArrayList<>();
            while (masters.isEmpty()) {
                ClusterInfo info = api.getBrokerClusterInfo(RPC_TIMEOUT);
                for (BrokerData broker : info.getBrokerAddrTable().values()) {
                    String master = broker.getBrokerAddrs().get(MixAll.MASTER_ID);
                    if (master != null) {
                        masters.add(master);
                    }
                }
                if (masters.isEmpty()) {
                    if (System.currentTimeMillis() > until) {
                        throw new IllegalStateException("no master broker registered with " + namesrv);
                    }
                    Thread.sleep(200);
                }
            }
            for (String master : masters) {
                api.createTopic(master, TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC,
                    new TopicConfig(topic, queues, queues, 6), RPC_TIMEOUT);
            }
            while (true) {
                try {
                    TopicRouteData route = api.getTopicRouteInfoFromNameServer(topic, RPC_TIMEOUT);
                    if (route != null && route.getQueueDatas().size() >= masters.size()) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > until) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("no route for " + topic);
                }
                Thread.sleep(100);
            }
            record("topic").put("topic", topic).put("queues", queues).put("masters", masters).emit();
        } finally {
            admin.shutdown();
        }
    }
}
