package interopspring;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQPushConsumerLifecycleListener;
import org.springframework.stereotype.Component;

/**
 * The push side: a {@link RocketMQMessageListener} whose container (the starter's
 * DefaultRocketMQListenerContainer, a DefaultMQPushConsumer) subscribes the topic with a tag
 * expression. Each delivery is a "received" record with style "push"; {@link SpringInterop}
 * waits on {@link #unique()}. The lifecycle callback only reports how the starter configured the
 * consumer, it changes nothing.
 */
@Component
@RocketMQMessageListener(
    topic = "${interop.topic}",
    consumerGroup = "${interop.push-group}",
    selectorExpression = "${interop.push-selector}",
    consumeThreadNumber = 2,
    consumeThreadMax = 4)
public class PushListener implements RocketMQListener<MessageExt>, RocketMQPushConsumerLifecycleListener {
    private final Set<String> seen = ConcurrentHashMap.newKeySet();
    private final AtomicInteger deliveries = new AtomicInteger();

    @Override
    public void onMessage(MessageExt message) {
        deliveries.incrementAndGet();
        seen.add(message.getUserProperty("idx"));
        SpringInterop.received("push", message);
    }

    @Override
    public void prepareStart(DefaultMQPushConsumer consumer) {
        SpringInterop.record("push_consumer")
            .put("group", consumer.getConsumerGroup())
            .put("message_model", consumer.getMessageModel().name())
            .put("consume_from", consumer.getConsumeFromWhere().name())
            .put("instance", consumer.getInstanceName())
            .emit();
    }

    int unique() {
        return seen.size();
    }

    int deliveries() {
        return deliveries.get();
    }
}
