// RocketMQ 4.9.8's SQL92 selector (rocketmq-filter: SelectorParser and the expression classes), run as an
// oracle: each stdin line is a JSON object {"expr": "...", "props": {"k": "v", ...}}; each stdout line is
// "true", "false" or "null" (the evaluated value), "PARSE" (SelectorParser.parse threw) or "EVAL" (the
// evaluation threw; the broker's ExpressionMessageFilter then treats the message as not matching).
// With the argument "messages", a rejected selector prints "PARSE " and, as a JSON string, what the broker puts
// in CHECK_CLIENT_CONFIG's remark: the parser's exception as Throwable.toString() writes it.
// Usage: java -cp "$ROCKETMQ_HOME/lib/*" tests/java/SqlEval.java [messages] < lines
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.filter.expression.BooleanExpression;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.parser.SelectorParser;

public class SqlEval {
    public static void main(String[] args) throws Exception {
        boolean messages = args.length > 0 && args[0].equals("messages");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            JSONObject obj = JSON.parseObject(line);
            final Map<String, Object> props = new HashMap<>();
            JSONObject p = obj.getJSONObject("props");
            for (String k : p.keySet()) {
                props.put(k, p.getString(k));
            }
            String out;
            BooleanExpression e = null;
            try {
                e = SelectorParser.parse(obj.getString("expr"));
                out = null;
            } catch (Throwable t) {
                Throwable cause = t.getCause() != null ? t.getCause() : t;
                out = messages ? "PARSE " + JSON.toJSONString(cause.toString()) : "PARSE";
            }
            if (out == null) {
                try {
                    Object v = e.evaluate(new EvaluationContext() {
                        public Object get(String name) { return props.get(name); }
                        public Map<String, Object> keyValues() { return props; }
                    });
                    out = String.valueOf(v);
                } catch (Throwable t) {
                    out = "EVAL";
                }
            }
            System.out.println(out);
        }
    }
}
