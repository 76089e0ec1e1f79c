// Apache's 4.9 Java push consumer subscribing by SQL92 (MessageSelector.bySql) to a cluster,
// for tests/interop/test_sql92_oracle.py. Run as a single-file program on the client classpath.
// Args: namesrv topic group expression count timeoutMs. Prints "STARTED" or
// "START_FAILED <reason>", then "RECV <body>" per message, and exits after `count` messages
// or the timeout.
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class SqlConsumer {
    public static void main(String[] args) throws Exception {
        CountDownLatch done = new CountDownLatch(Integer.parseInt(args[4]));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], MessageSelector.bySql(args[3]));
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                System.out.println("RECV " + new String(msg.getBody(), StandardCharsets.UTF_8));
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        try {
            consumer.start();
        } catch (Exception e) {
            System.out.println("START_FAILED " + String.valueOf(e.getMessage()).replace('\n', ' '));
            System.exit(0);
        }
        System.out.println("STARTED");
        System.out.flush();
        done.await(Long.parseLong(args[5]), TimeUnit.MILLISECONDS);
        System.out.flush();
        consumer.shutdown();
        System.exit(0);
    }
}
