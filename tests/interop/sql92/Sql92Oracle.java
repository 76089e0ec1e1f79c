// Apache RocketMQ's own SQL92 filter as an oracle for tests/interop/test_sql92_oracle.py.
// Run as a single-file program on the broker's classpath. Each stdin line is
// base64(expression) TAB base64(properties as "name\u0001value\u0002..."); each output line
// is MATCH, NOMATCH, or REFUSED <reason> when the broker's filter factory cannot compile the
// expression. Evaluation is the broker's: the message's properties as strings, an exception
// or a non-true result meaning no match.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;

import org.apache.rocketmq.broker.filter.MessageEvaluationContext;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.expression.Expression;

public class Sql92Oracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Base64.Decoder b64 = Base64.getDecoder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            String expression = new String(b64.decode(parts[0]), StandardCharsets.UTF_8);
            String properties = new String(b64.decode(parts[1]), StandardCharsets.UTF_8);
            Expression compiled;
            try {
                compiled = FilterFactory.INSTANCE.get("SQL92").compile(expression);
            } catch (Throwable e) {
                System.out.println("REFUSED " + String.valueOf(e.getMessage()).replace('\n', ' '));
                continue;
            }
            Map<String, String> props = MessageDecoder.string2messageProperties(properties);
            Object result;
            try {
                result = compiled.evaluate(new MessageEvaluationContext(props));
            } catch (Throwable e) {
                result = null;
            }
            System.out.println(Boolean.TRUE.equals(result) ? "MATCH" : "NOMATCH");
        }
    }
}
