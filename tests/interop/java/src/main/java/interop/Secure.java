package interop;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Apache's Java client on a secured cluster: sends {@code count} messages to {@code topic} and
 * consumes them with a push consumer of {@code group}, signing every request with
 * {@link AclClientRPCHook} when {@code accessKey}/{@code secretKey} are given. TLS is the
 * client's own switch ({@code -Dtls.enable=true} and the {@code tls.client.*} properties).
 * Prints a JSON line per send ({@code sent} or {@code send-error} with the broker's code) and per
 * received message, then {@code done}.
 */
public final class Secure {
    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            opts.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String namesrv = opts.get("namesrv");
        String topic = opts.get("topic");
        String group = opts.get("group");
        int count = Integer.parseInt(opts.getOrDefault("count", "10"));
        long timeoutMillis = Long.parseLong(opts.getOrDefault("timeout", "30")) * 1000;
        RPCHook hook = opts.containsKey("accessKey")
            ? new AclClientRPCHook(new SessionCredentials(opts.get("accessKey"), opts.get("secretKey")))
            : null;

        DefaultMQProducer producer = new DefaultMQProducer(group + "_producer", hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(group + "_p");
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(10000);
        producer.start();
        int sent = 0;
        try {
            for (int i = 0; i < count; i++) {
                Message msg = new Message(topic, "secure", "key-" + i,
                    ("secure:" + i).getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult result = producer.send(msg);
                    sent++;
                    Json.of("sent").put("i", i).put("msgId", result.getMsgId())
                        .put("status", result.getSendStatus().name()).emit();
                } catch (Exception e) {
                    // After its retries the producer wraps the broker's answer in a client error.
                    Throwable cause = e;
                    while (cause != null && !(cause instanceof MQBrokerException)) {
                        cause = cause.getCause();
                    }
                    if (cause != null) {
                        MQBrokerException refused = (MQBrokerException) cause;
                        Json.of("send-error").put("i", i).put("code", refused.getResponseCode())
                            .put("remark", String.valueOf(refused.getErrorMessage())).emit();
                    } else {
                        Json.of("send-error").put("i", i).put("code", -1).put("remark", e.toString()).emit();
                    }
                    break;
                }
            }
        } finally {
            producer.shutdown();
        }
        if (sent < count) {
            Json.of("done").put("sent", sent).put("received", 0).emit();
            return;
        }

        Map<String, String> received = new ConcurrentHashMap<>();
        CountDownLatch all = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook, new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "_c");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                if (received.putIfAbsent(msg.getKeys(), body) == null) {
                    Json.of("received").put("keys", msg.getKeys()).put("body", body)
                        .put("tags", msg.getTags()).emit();
                    all.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            all.await(timeoutMillis, TimeUnit.MILLISECONDS);
        } finally {
            consumer.shutdown();
        }
        Json.of("done").put("sent", sent).put("received", received.size()).emit();
    }
}
