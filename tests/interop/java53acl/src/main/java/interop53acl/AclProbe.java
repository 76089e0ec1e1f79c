package interop53acl;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * Sends raw remoting requests, each signed (or not) by the RocketMQ 5.3 Java client's own
 * AclClientRPCHook, and prints each answer's code: the Java side of the ACL 2.0 differential
 * table (tests/interop/test_acl2_differential.py).
 *
 * <p>Each stdin line is one request, tab-separated: case id, broker address, access key (empty:
 * unsigned), secret key, request code, header fields as {@code key=value} joined by U+001F,
 * body (UTF-8 text, may be empty). Each answer is one JSON line on stdout:
 * {@code {"event":"probe","id":...,"code":N,"remark":...}}, or {@code "error"} when the request
 * got no answer.
 */
public final class AclProbe {
    public static void main(String[] args) throws Exception {
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        NettyRemotingClient client = new NettyRemotingClient(new NettyClientConfig());
        client.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            String id = f[0];
            String addr = f[1];
            String accessKey = f[2];
            String secretKey = f[3];
            RemotingCommand request = RemotingCommand.createRequestCommand(Integer.parseInt(f[4]), null);
            if (!f[5].isEmpty()) {
                for (String pair : f[5].split("\u001f")) {
                    int eq = pair.indexOf('=');
                    request.addExtField(pair.substring(0, eq), pair.substring(eq + 1));
                }
            }
            if (!f[6].isEmpty()) {
                request.setBody(f[6].getBytes(StandardCharsets.UTF_8));
            }
            if (!accessKey.isEmpty()) {
                // What a signed client does before every request (the hook a producer registers).
                new AclClientRPCHook(new SessionCredentials(accessKey, secretKey)).doBeforeRequest(addr, request);
            }
            String record;
            try {
                RemotingCommand response = client.invokeSync(addr, request, 10000);
                record = "{\"event\":\"probe\",\"id\":" + quote(id) + ",\"code\":" + response.getCode()
                    + ",\"remark\":" + quote(response.getRemark() == null ? "" : response.getRemark()) + "}";
            } catch (Exception e) {
                record = "{\"event\":\"probe\",\"id\":" + quote(id) + ",\"error\":" + quote(e.toString()) + "}";
            }
            System.out.println(record);
            System.out.flush();
        }
        client.shutdown();
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }
}
