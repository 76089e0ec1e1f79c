package interop53.shim;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * What the 4.9.8 scenario program (../java, interop.Scenarios) uses of rocketmq-tools'
 * DefaultMQAdminExt, on the 5.3.2 client alone: rocketmq-tools has no 5.3.2 release and 5.3.3's
 * cannot share a classpath with client 5.3.2. The harness builds that program against this class
 * (tests/interop/harness.py, LEGACY_RENAMES), so the same scenarios run on both clients.
 */
public class DefaultMQAdminExt {
    private static final long TIMEOUT = 10_000;
    private final DefaultMQProducer client = new DefaultMQProducer();

    public void setNamesrvAddr(String namesrv) {
        client.setNamesrvAddr(namesrv);
    }

    public void setInstanceName(String name) {
        client.setInstanceName(name);
        client.setProducerGroup(name + "_shim");
    }

    public void start() throws Exception {
        client.start();
    }

    public void shutdown() {
        client.shutdown();
    }

    private MQClientInstance instance() {
        return client.getDefaultMQProducerImpl().getMqClientFactory();
    }

    private MQClientAPIImpl api() {
        return instance().getMQClientAPIImpl();
    }

    public ClusterInfo examineBrokerClusterInfo() throws Exception {
        return api().getBrokerClusterInfo(TIMEOUT);
    }

    public void createAndUpdateTopicConfig(String addr, TopicConfig config) throws Exception {
        api().createTopic(addr, TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC, config, TIMEOUT);
    }

    public TopicRouteData examineTopicRouteInfo(String topic) throws Exception {
        return api().getTopicRouteInfoFromNameServer(topic, TIMEOUT);
    }

    public QueryResult queryMessage(String topic, String key, int maxNum, long begin, long end) throws Exception {
        return instance().getMQAdminImpl().queryMessage(topic, key, maxNum, begin, end);
    }
}
