package benchload;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.QueueData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The benchmark load on Apache RocketMQ's Java client, written for this project because Apache's
 * benchmark classes (rocketmq-example) are not published to Maven Central. It drives the same
 * client calls as Apache's {@code Producer}, {@code BatchProducer} and {@code Consumer}, and
 * reports over a fixed measuring window (after a warm-up) instead of every 10 s, with RT taken
 * from {@code System.nanoTime()} so the p99 has microsecond resolution.
 *
 * <pre>
 * Load topic    namesrv=H:P topic=T queues=8 [count=N]          create T (or T_0..T_{N-1}) on every master
 * Load producer namesrv=H:P topic=T threads=16 size=128 seconds=S warmup=W [topics=N] [limit=M]
 * Load batch    namesrv=H:P topic=T threads=16 size=128 batch=32 seconds=S warmup=W
 * Load consumer namesrv=H:P topic=T group=G count=N timeout=S threads=20
 * Load e2e      namesrv=H:P topic=T rate=5000 seconds=S warmup=W threads=8
 * </pre>
 * The last line printed is one JSON object with the results (tps, avg_rt_ms, max_rt_ms, p99_ms,
 * count, failed, ...); bench/side_by_side.py reads it. {@code limit} stops the senders after M
 * sends in all (with {@code topics=N}, round-robin over the topics: 8 x N touches every queue).
 * With {@code topics=N > 1} the senders first send one unmeasured message to each topic, so the
 * client knows every route before the warm-up starts.
 */
public final class Load {
    private final Map<String, String> opts;

    private Load(Map<String, String> opts) {
        this.opts = opts;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String arg : Arrays.copyOfRange(args, 1, args.length)) {
            int eq = arg.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("option without '=': " + arg);
            }
            opts.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Load load = new Load(opts);
        String result;
        switch (args.length == 0 ? "" : args[0]) {
            case "topic": result = load.createTopics(); break;
            case "producer": result = load.produce(false); break;
            case "batch": result = load.produce(true); break;
            case "consumer": result = load.consume(); break;
            case "e2e": result = load.endToEnd(); break;
            default: throw new IllegalArgumentException("mode: topic|producer|batch|consumer|e2e");
        }
        System.out.println(result);
        System.out.flush();
        System.exit(0);
    }

    private String str(String key, String fallback) {
        return opts.getOrDefault(key, fallback);
    }

    private int num(String key, int fallback) {
        return Integer.parseInt(opts.getOrDefault(key, Integer.toString(fallback)));
    }

    private String namesrv() {
        String addr = opts.get("namesrv");
        if (addr == null) {
            throw new IllegalArgumentException("namesrv=HOST:PORT is required");
        }
        return addr;
    }

    // -- topics ------------------------------------------------------------------------------

    private String createTopics() throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv());
        admin.setInstanceName("load_admin_" + System.nanoTime());
        admin.start();
        String topic = str("topic", "BenchmarkTest");
        int queues = num("queues", 8);
        int count = num("count", 1);
        long started = System.nanoTime();
        try {
            ClusterInfo info = admin.examineBrokerClusterInfo();
            Set<String> brokers = new TreeSet<>();
            for (int i = 0; i < count; i++) {
                String name = count == 1 ? topic : topic + "_" + i;
                for (BrokerData broker : info.getBrokerAddrTable().values()) {
                    String master = broker.getBrokerAddrs().get(0L);
                    admin.createAndUpdateTopicConfig(master, new TopicConfig(name, queues, queues, 6));
                    brokers.add(broker.getBrokerName());
                }
            }
            String last = count == 1 ? topic : topic + "_" + (count - 1);
            long until = System.currentTimeMillis() + 60_000;
            while (true) {
                try {
                    TopicRouteData route = admin.examineTopicRouteInfo(last);
                    Set<String> routed = new TreeSet<>();
                    for (QueueData queue : route.getQueueDatas()) {
                        routed.add(queue.getBrokerName());
                    }
                    if (routed.containsAll(brokers)) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > until) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > until) {
                    throw new IllegalStateException("route of " + last + " never named " + brokers);
                }
                Thread.sleep(50);
            }
            return "{\"mode\": \"topic\", \"topics\": " + count + ", \"brokers\": " + brokers.size()
                + ", \"seconds\": " + (System.nanoTime() - started) / 1e9 + "}";
        } finally {
            admin.shutdown();
        }
    }

    // -- sending -----------------------------------------------------------------------------

    /** Per-thread results; latencies in microseconds, only for sends inside the window. */
    private static class Sender extends Thread {
        long[] rt = new long[1 << 16];
        int n;
        long messages;
        long failed;
        long maxUs;
        long sumUs;

        void record(long us, long msgs) {
            if (n == rt.length) {
                rt = Arrays.copyOf(rt, n * 2);
            }
            rt[n++] = us;
            messages += msgs;
            sumUs += us;
            maxUs = Math.max(maxUs, us);
        }
    }

    private static String body(int size) {
        // Apache's Producer: one random alphanumeric string, built once.
        String chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        Random random = new Random();
        StringBuilder sb = new StringBuilder(size);
        for (int i = 0; i < size; i++) {
            sb.append(chars.charAt(random.nextInt(chars.length())));
        }
        return sb.toString();
    }

    private DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv());
        producer.setInstanceName(Long.toString(System.currentTimeMillis()));
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setSendMsgTimeout(num("timeoutMs", 3000));
        producer.start();
        return producer;
    }

    private String produce(boolean batched) throws Exception {
        String topic = str("topic", "BenchmarkTest");
        int threads = num("threads", 16);
        int size = num("size", 128);
        int batch = batched ? num("batch", 32) : 1;
        int topics = num("topics", 1);
        long limit = Long.parseLong(str("limit", "0"));
        AtomicLong started = new AtomicLong();
        long warmupNs = TimeUnit.SECONDS.toNanos(num("warmup", 3));
        long windowNs = TimeUnit.SECONDS.toNanos(num("seconds", 10));
        DefaultMQProducer producer = producer(batched ? "benchmark_batch_producer" : "benchmark_producer");
        byte[] payload = body(size).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        String[] names = new String[topics];
        for (int i = 0; i < topics; i++) {
            names[i] = topics == 1 ? topic : topic + "_" + i;
        }
        if (topics > 1) {
            prime(producer, names, threads, payload);
        }
        long start = System.nanoTime();
        long measureFrom = start + warmupNs;
        long stopAt = measureFrom + windowNs;
        List<Sender> senders = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int offset = t;
            Sender sender = new Sender() {
                @Override
                public void run() {
                    long i = offset;
                    while (true) {
                        String name = names[(int) (i++ % names.length)];
                        long begin = System.nanoTime();
                        if (begin >= stopAt || (limit > 0 && started.incrementAndGet() > limit)) {
                            return;
                        }
                        boolean ok;
                        try {
                            SendResult result;
                            if (batched) {
                                List<Message> msgs = new ArrayList<>(batch);
                                for (int b = 0; b < batch; b++) {
                                    msgs.add(new Message(name, payload));
                                }
                                result = producer.send(msgs);
                            } else {
                                result = producer.send(new Message(name, payload));
                            }
                            ok = result.getSendStatus() == SendStatus.SEND_OK;
                        } catch (Exception e) {
                            ok = false;
                        }
                        long end = System.nanoTime();
                        if (begin >= measureFrom && end <= stopAt) {
                            if (ok) {
                                record((end - begin) / 1000, batch);
                            } else {
                                failed++;
                            }
                        }
                    }
                }
            };
            senders.add(sender);
            sender.start();
        }
        // The measuring window opens now: bench/side_by_side.py samples the broker's CPU from here.
        TimeUnit.NANOSECONDS.sleep(Math.max(0, measureFrom - System.nanoTime()));
        System.out.println("{\"event\": \"window\"}");
        System.out.flush();
        for (Sender sender : senders) {
            sender.join();
        }
        producer.shutdown();
        return summary(batched ? "batch" : "producer", senders, windowNs, batch);
    }

    /**
     * One unmeasured send to each topic before the clock starts. A fresh client looks a topic's
     * route up on its first send to it, one lookup at a time (under the client's name-server
     * lock): with 1,000 topics those lookups would fill the warm-up and spill into the window,
     * which is then about the client's start, not the broker's steady state.
     */
    private static void prime(DefaultMQProducer producer, String[] names, int threads, byte[] payload)
        throws InterruptedException {
        List<Thread> primers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int first = t;
            Thread primer = new Thread(() -> {
                for (int i = first; i < names.length; i += threads) {
                    try {
                        producer.send(new Message(names[i], payload));
                    } catch (Exception e) {
                        // The route is looked up before the send: a failure here still primes it.
                    }
                }
            });
            primers.add(primer);
            primer.start();
        }
        for (Thread primer : primers) {
            primer.join();
        }
    }

    private static String summary(String mode, List<Sender> senders, long windowNs, int batch) {
        int total = 0;
        long messages = 0;
        long failed = 0;
        long max = 0;
        long sum = 0;
        for (Sender s : senders) {
            total += s.n;
            messages += s.messages;
            failed += s.failed;
            max = Math.max(max, s.maxUs);
            sum += s.sumUs;
        }
        long[] all = new long[total];
        int at = 0;
        for (Sender s : senders) {
            System.arraycopy(s.rt, 0, all, at, s.n);
            at += s.n;
        }
        Arrays.sort(all);
        double seconds = windowNs / 1e9;
        double p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) Math.ceil(total * 0.99) - 1)] / 1000.0;
        return String.format(java.util.Locale.ROOT,
            "{\"mode\": \"%s\", \"tps\": %.1f, \"mps\": %.1f, \"avg_rt_ms\": %.3f, \"max_rt_ms\": %.3f,"
                + " \"p99_ms\": %.3f, \"requests\": %d, \"count\": %d, \"failed\": %d, \"batch\": %d,"
                + " \"seconds\": %.3f}",
            mode, total / seconds, messages / seconds, total == 0 ? 0.0 : sum / 1000.0 / total, max / 1000.0,
            p99, total, messages, failed, batch, seconds);
    }

    // -- consuming ---------------------------------------------------------------------------

    private DefaultMQPushConsumer pushConsumer(String group, String topic, ConsumeFromWhere from)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv());
        consumer.setInstanceName(Long.toString(System.nanoTime()));
        int threads = num("threads", 20);
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        consumer.setAllocateMessageQueueStrategy(new AllocateMessageQueueAveragely());
        consumer.setConsumeFromWhere(from);
        consumer.subscribe(topic, "*");
        return consumer;
    }

    private String consume() throws Exception {
        String topic = str("topic", "BenchmarkTest");
        long target = Long.parseLong(str("count", "100000"));
        long timeoutMs = TimeUnit.SECONDS.toMillis(num("timeout", 120));
        AtomicLong consumed = new AtomicLong();
        AtomicLong firstNs = new AtomicLong();
        AtomicLong lastNs = new AtomicLong();
        AtomicLong maxB2c = new AtomicLong();
        AtomicLong sumB2c = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = pushConsumer(
            str("group", "benchmark_consumer"), topic, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.currentTimeMillis();
            long nowNs = System.nanoTime();
            firstNs.compareAndSet(0, nowNs);
            for (MessageExt msg : msgs) {
                long b2c = now - msg.getBornTimestamp();
                sumB2c.addAndGet(b2c);
                maxB2c.accumulateAndGet(b2c, Math::max);
            }
            lastNs.set(nowNs);
            if (consumed.addAndGet(msgs.size()) >= target) {
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long started = System.nanoTime();
        consumer.start();
        done.await(timeoutMs, TimeUnit.MILLISECONDS);
        long n = consumed.get();
        consumer.shutdown();
        double seconds = n == 0 ? 0 : (lastNs.get() - firstNs.get()) / 1e9;
        return String.format(java.util.Locale.ROOT,
            "{\"mode\": \"consumer\", \"tps\": %.1f, \"count\": %d, \"target\": %d, \"seconds\": %.3f,"
                + " \"first_after_s\": %.3f, \"avg_b2c_ms\": %.3f, \"max_b2c_ms\": %d}",
            seconds > 0 ? n / seconds : 0.0, n, target, seconds,
            n == 0 ? 0.0 : (firstNs.get() - started) / 1e9, n == 0 ? 0.0 : (double) sumB2c.get() / n,
            maxB2c.get());
    }

    // -- end to end --------------------------------------------------------------------------

    /**
     * A push consumer and paced sync senders in this process: each body starts with the send's
     * {@code System.nanoTime()}, so producer-to-listener latency has microsecond resolution.
     */
    private String endToEnd() throws Exception {
        String topic = str("topic", "BenchmarkTest");
        int rate = num("rate", 5000);
        int threads = Math.max(1, num("senders", 8));
        int size = num("size", 128);
        long warmupNs = TimeUnit.SECONDS.toNanos(num("warmup", 3));
        long windowNs = TimeUnit.SECONDS.toNanos(num("seconds", 10));
        Sender latencies = new Sender();
        Object lock = new Object();
        long[] window = new long[2];
        DefaultMQPushConsumer consumer = pushConsumer(
            "benchmark_e2e_" + System.nanoTime(), topic, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.nanoTime();
            synchronized (lock) {
                for (MessageExt msg : msgs) {
                    long sentNs = java.nio.ByteBuffer.wrap(msg.getBody()).getLong();
                    if (sentNs >= window[0] && sentNs < window[1]) {
                        latencies.record((now - sentNs) / 1000, 1);
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = producer("benchmark_e2e_producer");
        // The consumer must own its queues before the window opens: send until one comes back.
        long probeUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        long before = latencies.n;
        synchronized (lock) {
            window[0] = 0;
            window[1] = Long.MAX_VALUE;
        }
        while (System.nanoTime() < probeUntil) {
            producer.send(new Message(topic, stamped(size)));
            Thread.sleep(20);
            synchronized (lock) {
                if (latencies.n > before) {
                    break;
                }
            }
        }
        synchronized (lock) {
            latencies.n = 0;
            latencies.messages = 0;
            latencies.sumUs = 0;
            latencies.maxUs = 0;
            long start = System.nanoTime();
            window[0] = start + warmupNs;
            window[1] = start + warmupNs + windowNs;
        }
        long start = System.nanoTime();
        long stopAt = start + warmupNs + windowNs;
        long intervalNs = 1_000_000_000L * threads / rate;
        AtomicLong failed = new AtomicLong();
        AtomicLong sent = new AtomicLong();
        List<Thread> senders = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long first = start + intervalNs * t / threads;
            Thread sender = new Thread(() -> {
                long next = first;
                while (next < stopAt) {
                    long wait = next - System.nanoTime();
                    if (wait > 0) {
                        java.util.concurrent.locks.LockSupport.parkNanos(wait);
                    }
                    try {
                        producer.send(new Message(topic, stamped(size)));
                        sent.incrementAndGet();
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                    next += intervalNs;
                }
            });
            senders.add(sender);
            sender.start();
        }
        for (Thread sender : senders) {
            sender.join();
        }
        // The window's last messages arrive: wait until nothing new comes for 2 s (30 s at most).
        long quietUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        int seen = -1;
        while (System.nanoTime() < quietUntil) {
            int now;
            synchronized (lock) {
                now = latencies.n;
            }
            if (now == seen) {
                break;
            }
            seen = now;
            Thread.sleep(2000);
        }
        producer.shutdown();
        consumer.shutdown();
        long[] all;
        synchronized (lock) {
            all = Arrays.copyOf(latencies.rt, latencies.n);
        }
        Arrays.sort(all);
        int n = all.length;
        double p99 = n == 0 ? 0 : all[Math.min(n - 1, (int) Math.ceil(n * 0.99) - 1)] / 1000.0;
        double p50 = n == 0 ? 0 : all[n / 2] / 1000.0;
        return String.format(java.util.Locale.ROOT,
            "{\"mode\": \"e2e\", \"rate\": %d, \"received\": %d, \"sent\": %d, \"failed\": %d,"
                + " \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"seconds\": %.3f}",
            rate, n, sent.get(), failed.get(), p50, p99, n == 0 ? 0.0 : all[n - 1] / 1000.0, windowNs / 1e9);
    }

    private static byte[] stamped(int size) {
        java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocate(Math.max(8, size));
        buf.putLong(System.nanoTime());
        return buf.array();
    }
}
