package interop5;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * The Java 5.x client (rocketmq-client-java) against the broker's gRPC endpoint, for
 * tests/grpc/test_java5_client.py. One line of output per event: "SENT id", "MSG {json}",
 * and "DONE" at the end.
 *
 * <pre>
 * produce ENDPOINT TOPIC COUNT          normal messages with a tag, keys and a property
 * consume ENDPOINT TOPIC GROUP COUNT    SimpleConsumer: receive and ack COUNT messages
 * push ENDPOINT TOPIC GROUP COUNT       PushConsumer: consume COUNT messages
 * </pre>
 */
public final class Grpc5 {
  private Grpc5() {}

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    ClientServiceProvider provider = ClientServiceProvider.loadService();
    // The Java client speaks TLS by default; plain text here unless GRPC5_SSL=true keeps it.
    ClientConfiguration config =
        ClientConfiguration.newBuilder()
            .setEndpoints(args[1])
            .enableSsl(Boolean.parseBoolean(System.getenv("GRPC5_SSL")))
            .setRequestTimeout(Duration.ofSeconds(5))
            .build();
    String topic = args[2];
    if (mode.equals("produce")) {
      int count = Integer.parseInt(args[3]);
      try (Producer producer =
          provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
        for (int i = 0; i < count; i++) {
          Message message =
              provider
                  .newMessageBuilder()
                  .setTopic(topic)
                  .setTag("JavaTag")
                  .setKeys("jk" + i, "shared")
                  .addProperty("i", Integer.toString(i))
                  .setBody(("java-" + i).getBytes(StandardCharsets.UTF_8))
                  .build();
          SendReceipt receipt = producer.send(message);
          System.out.println("SENT " + receipt.getMessageId());
        }
      }
    } else if (mode.equals("push")) {
      String group = args[3];
      int count = Integer.parseInt(args[4]);
      CountDownLatch done = new CountDownLatch(count);
      try (PushConsumer consumer =
          provider
              .newPushConsumerBuilder()
              .setClientConfiguration(config)
              .setConsumerGroup(group)
              .setSubscriptionExpressions(
                  Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
              .setMessageListener(
                  view -> {
                    synchronized (Grpc5.class) {
                      System.out.println("MSG " + json(view));
                    }
                    done.countDown();
                    return ConsumeResult.SUCCESS;
                  })
              .build()) {
        done.await(40, TimeUnit.SECONDS);
      }
    } else {
      String group = args[3];
      int count = Integer.parseInt(args[4]);
      try (SimpleConsumer consumer =
          provider
              .newSimpleConsumerBuilder()
              .setClientConfiguration(config)
              .setConsumerGroup(group)
              .setAwaitDuration(Duration.ofSeconds(5))
              .setSubscriptionExpressions(
                  Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
              .build()) {
        int got = 0;
        long deadline = System.currentTimeMillis() + 40_000;
        while (got < count && System.currentTimeMillis() < deadline) {
          List<MessageView> views = consumer.receive(16, Duration.ofSeconds(30));
          for (MessageView view : views) {
            System.out.println("MSG " + json(view));
            consumer.ack(view);
            got++;
          }
        }
      }
    }
    System.out.println("DONE");
    System.out.flush();
    System.exit(0);
  }

  private static String json(MessageView view) {
    byte[] body = new byte[view.getBody().remaining()];
    view.getBody().duplicate().get(body);
    StringBuilder out = new StringBuilder("{");
    out.append("\"body\":").append(quote(new String(body, StandardCharsets.UTF_8)));
    out.append(",\"id\":").append(quote(view.getMessageId().toString()));
    out.append(",\"tag\":").append(quote(view.getTag().orElse("")));
    out.append(",\"attempt\":").append(view.getDeliveryAttempt());
    out.append(",\"keys\":[");
    String sep = "";
    for (String key : new java.util.TreeSet<>(view.getKeys())) {
      out.append(sep).append(quote(key));
      sep = ",";
    }
    out.append("],\"properties\":{");
    sep = "";
    for (Map.Entry<String, String> e : new TreeMap<>(view.getProperties()).entrySet()) {
      out.append(sep).append(quote(e.getKey())).append(':').append(quote(e.getValue()));
      sep = ",";
    }
    return out.append("}}").toString();
  }

  private static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
