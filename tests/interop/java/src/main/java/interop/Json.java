package interop;

import java.util.LinkedHashMap;
import java.util.Map;

/** One JSON object per line on stdout: the record format the pytest side parses. */
public final class Json {
    private final Map<String, Object> fields = new LinkedHashMap<>();

    public static Json of(String event) {
        Json json = new Json();
        json.fields.put("event", event);
        return json;
    }

    public Json put(String key, Object value) {
        fields.put(key, value);
        return this;
    }

    public void emit() {
        String line = render(fields);
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static String render(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        if (value instanceof Map) {
            StringBuilder out = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                out.append(quote(String.valueOf(entry.getKey()))).append(':').append(render(entry.getValue()));
            }
            return out.append('}').toString();
        }
        if (value instanceof Iterable) {
            StringBuilder out = new StringBuilder("[");
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                out.append(render(item));
            }
            return out.append(']').toString();
        }
        return quote(value.toString());
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
