package interop;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Runs many mqadmin commands in one JVM: each stdin line is one command's arguments, separated by
 * tabs; each command's output (stdout and stderr together) is printed as one JSON line. Starting
 * the JVM once keeps the suite fast; MQAdminStartup itself is Apache's, unchanged.
 */
public final class AdminBatch {
    public static void main(String[] args) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] command = line.split("\t");
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, "UTF-8");
            System.setOut(capture);
            System.setErr(capture);
            long started = System.currentTimeMillis();
            try {
                MQAdminStartup.main0(command, null);
            } catch (Throwable e) {
                e.printStackTrace(capture);
            } finally {
                capture.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            Json.of("admin")
                .put("command", command[0])
                .put("args", java.util.Arrays.asList(command))
                .put("millis", System.currentTimeMillis() - started)
                .put("output", captured.toString("UTF-8"))
                .emit();
        }
        realOut.flush();
        System.exit(0);
    }
}
