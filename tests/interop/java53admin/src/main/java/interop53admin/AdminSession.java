package interop53admin;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Apache RocketMQ 5.3.3's mqadmin, many commands in one JVM, driven line by line: each stdin line
 * is one command's arguments separated by tabs (a lone tab: no arguments, mqadmin's list of
 * commands). Once the command has returned, its output (stdout and stderr together) is printed as
 * one JSON line and flushed, so the test can build state between two commands. MQAdminStartup is
 * Apache's, unchanged; the JVM starts once per cluster (tests/interop/test_mqadmin53.py).
 *
 * <p>A command whose arguments mqadmin rejects calls System.exit (ServerUtil.parseCmdLine): the
 * security manager turns that into an exception, printed as the command's output, so one bad
 * command does not end the session (run with -Djava.security.manager=allow).
 */
public final class AdminSession {
    private static volatile boolean exiting;

    public static void main(String[] args) throws Exception {
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkPermission(java.security.Permission perm) {
            }

            @Override
            public void checkPermission(java.security.Permission perm, Object context) {
            }

            @Override
            public void checkExit(int status) {
                if (!exiting) {
                    throw new SecurityException("mqadmin called System.exit(" + status + ")");
                }
            }
        });
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
            String record = "{\"event\":\"admin\",\"command\":" + quote(command.length > 0 ? command[0] : "")
                + ",\"millis\":" + (System.currentTimeMillis() - started)
                + ",\"output\":" + quote(captured.toString("UTF-8")) + "}";
            synchronized (realOut) {
                realOut.println(record);
                realOut.flush();
            }
        }
        realOut.flush();
        exiting = true;
        System.exit(0);
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
