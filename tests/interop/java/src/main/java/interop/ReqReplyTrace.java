package interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.trace.TraceView;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Request-reply and message traces of Apache RocketMQ's Java client (4.9.8), against the name
 * server given: {@code ReqReplyTrace namesrv=HOST:PORT prefix=NAME expect=N}. In order:
 * <ol>
 *   <li>a replier (push consumer answering with {@code MessageUtil.createReplyMessage}) on
 *       {@code <prefix>_java_replies}; {@code ready} is printed once it runs;</li>
 *   <li>{@code request()} (sync, callback, and one nobody answers) on {@code <prefix>_py_replies},
 *       where the test's own replier answers;</li>
 *   <li>a producer and a push consumer with {@code enableMsgTrace}: their traces go to
 *       RMQ_SYS_TRACE_TOPIC and the test reads them;</li>
 *   <li>waits until the replier has answered {@code expect} requests, then exits.</li>
 * </ol>
 * Every event is a JSON line (tests/interop/test_request_reply_trace.py reads them).
 */
public final class ReqReplyTrace {
    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            opts.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String namesrv = opts.get("namesrv");
        String prefix = opts.get("prefix");
        int expect = Integer.parseInt(opts.getOrDefault("expect", "0"));
        int failures = 0;

        // 1. The replier.
        AtomicInteger replied = new AtomicInteger();
        DefaultMQProducer replyProducer = new DefaultMQProducer(prefix + "_reply_pg");
        replyProducer.setNamesrvAddr(namesrv);
        replyProducer.setInstanceName(prefix + "_replier");
        replyProducer.start();
        DefaultMQPushConsumer replier = new DefaultMQPushConsumer(prefix + "_reply_cg");
        replier.setNamesrvAddr(namesrv);
        replier.setInstanceName(prefix + "_replier");
        replier.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        replier.subscribe(prefix + "_java_replies", "*");
        replier.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                try {
                    Message reply = MessageUtil.createReplyMessage(msg, ("jre:" + body).getBytes(StandardCharsets.UTF_8));
                    SendResult result = replyProducer.send(reply, 5000);
                    Json.of("replied").put("body", body).put("status", result.getSendStatus().name())
                        .put("replyTopic", reply.getTopic())
                        .put("correlationId", msg.getProperty("CORRELATION_ID"))
                        .put("replyTo", msg.getProperty("REPLY_TO_CLIENT"))
                        .put("ttl", msg.getProperty("TTL")).emit();
                } catch (Exception e) {
                    Json.of("replyFailed").put("body", body).put("error", e.toString()).emit();
                }
                replied.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        replier.start();
        Json.of("ready").emit();

        // 2. Requests to the test's replier.
        DefaultMQProducer requester = new DefaultMQProducer(prefix + "_request_pg");
        requester.setNamesrvAddr(namesrv);
        requester.setInstanceName(prefix + "_requester");
        requester.start();
        String topic = prefix + "_py_replies";
        for (int i = 0; i < 3; i++) {
            try {
                Message reply = requester.request(new Message(topic, ("jreq-" + i).getBytes(StandardCharsets.UTF_8)), 15000);
                Json.of("reply").put("i", i).put("body", new String(reply.getBody(), StandardCharsets.UTF_8))
                    .put("topic", reply.getTopic())
                    .put("correlationId", reply.getProperty("CORRELATION_ID"))
                    .put("msgType", reply.getProperty("MSG_TYPE")).emit();
            } catch (Exception e) {
                failures++;
                Json.of("requestFailed").put("i", i).put("error", e.toString()).emit();
            }
        }
        CountDownLatch called = new CountDownLatch(1);
        requester.request(new Message(topic, "jreq-cb".getBytes(StandardCharsets.UTF_8)), new RequestCallback() {
            @Override
            public void onSuccess(Message reply) {
                Json.of("callbackReply").put("body", new String(reply.getBody(), StandardCharsets.UTF_8)).emit();
                called.countDown();
            }

            @Override
            public void onException(Throwable e) {
                Json.of("callbackFailed").put("error", e.toString()).emit();
                called.countDown();
            }
        }, 15000);
        if (!called.await(30, TimeUnit.SECONDS)) {
            failures++;
        }
        try {
            requester.request(new Message(topic, "ignore me".getBytes(StandardCharsets.UTF_8)), 1500);
            Json.of("unexpectedReply").emit();
            failures++;
        } catch (Exception e) {
            Json.of("timedOut").put("error", e.getClass().getSimpleName()).put("message", e.getMessage()).emit();
        }
        requester.shutdown();

        // 3. Traced send and consumption.
        String traced = prefix + "_traced";
        DefaultMQProducer tracedProducer = new DefaultMQProducer(prefix + "_trace_pg", true, null);
        tracedProducer.setNamesrvAddr(namesrv);
        tracedProducer.setInstanceName(prefix + "_traced");
        tracedProducer.start();
        DefaultMQPushConsumer tracedConsumer = new DefaultMQPushConsumer(prefix + "_trace_cg", true, null);
        tracedConsumer.setNamesrvAddr(namesrv);
        tracedConsumer.setInstanceName(prefix + "_traced");
        tracedConsumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        tracedConsumer.subscribe(traced, "*");
        CountDownLatch consumed = new CountDownLatch(2);
        List<String> sentIds = new ArrayList<>();
        tracedConsumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                Json.of("tracedConsumed").put("msgId", msg.getMsgId()).emit();
                consumed.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        tracedConsumer.start();
        for (int i = 0; i < 2; i++) {
            Message msg = new Message(traced, "TagT", "jkey-" + i, ("traced-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult result = tracedProducer.send(msg, 5000);
            sentIds.add(result.getMsgId());
            Json.of("tracedSent").put("i", i).put("msgId", result.getMsgId())
                .put("offsetMsgId", result.getOffsetMsgId()).emit();
        }
        if (!consumed.await(60, TimeUnit.SECONDS)) {
            failures++;
            Json.of("tracedNotConsumed").emit();
        }
        // The trace dispatchers send in the background: wait until the broker's index finds
        // each message's send and consumption traces before shutting them down.
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(prefix + "_admin");
        admin.start();
        for (String msgId : sentIds) {
            Set<String> kinds = new TreeSet<>();
            long until = System.currentTimeMillis() + 60_000;
            while (kinds.size() < 3 && System.currentTimeMillis() < until) {
                try {
                    QueryResult found = admin.queryMessage("RMQ_SYS_TRACE_TOPIC", msgId, 64, 0, System.currentTimeMillis());
                    for (MessageExt trace : found.getMessageList()) {
                        for (TraceView view : TraceView.decodeFromTraceTransData(msgId, trace)) {
                            kinds.add(view.getMsgType());
                        }
                    }
                } catch (Exception e) {
                    // not indexed yet
                }
                if (kinds.size() < 3) {
                    Thread.sleep(200);
                }
            }
            Json.of("traceSeenByJava").put("msgId", msgId).put("kinds", String.join(",", kinds)).emit();
        }
        admin.shutdown();
        // Shutting down flushes the trace dispatchers.
        tracedConsumer.shutdown();
        tracedProducer.shutdown();

        // 4. Answer the test's requests, then leave.
        long deadline = System.currentTimeMillis() + 60_000;
        while (replied.get() < expect && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        replier.shutdown();
        replyProducer.shutdown();
        Json.of("end").put("replied", replied.get()).put("failures", failures).emit();
        System.exit(failures == 0 ? 0 : 1);
    }
}
