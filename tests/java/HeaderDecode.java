// RocketMQ 4.9.8's reflective request-header decoder, run on a SEND_MESSAGE (10) header without one of its
// @CFNotNull fields: prints one JSON line saying whether the decode threw and what the field reads as.
// Usage: java -cp "$ROCKETMQ_HOME/lib/*" tests/java/HeaderDecode.java FIELD_TO_LEAVE_OUT
import java.util.HashMap;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class HeaderDecode {
    public static void main(String[] args) throws Exception {
        HashMap<String, String> fields = new HashMap<>();
        fields.put("producerGroup", "PG");
        fields.put("topic", "T");
        fields.put("defaultTopic", "TBW102");
        fields.put("defaultTopicQueueNums", "4");
        fields.put("queueId", "0");
        fields.put("sysFlag", "0");
        fields.put("bornTimestamp", "1");
        fields.put("flag", "0");
        fields.remove(args[0]);
        RemotingCommand request = RemotingCommand.createRequestCommand(10, null);
        request.setExtFields(fields);
        String threw = "null";
        SendMessageRequestHeader header = null;
        try {
            header = (SendMessageRequestHeader) request.decodeCommandCustomHeader(SendMessageRequestHeader.class);
        } catch (Exception e) {
            threw = "\"" + e.getClass().getSimpleName() + "\"";
        }
        String group = header == null || header.getProducerGroup() == null ? "null"
            : "\"" + header.getProducerGroup() + "\"";
        System.out.println("{\"threw\": " + threw + ", \"decoded\": " + (header != null) + ", \"producerGroup\": "
            + group + "}");
    }
}
