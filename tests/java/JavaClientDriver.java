// RocketMQ 4.9.8's own Java client driving a broker: the differential tests' "clients" leg
// (tests/client/test_java_client.py). Run as a single-file program, no build step:
//   java -cp "$ROCKETMQ_HOME/lib/*" tests/java/JavaClientDriver.java COMMAND NAMESRV TOPIC ARGS...
// Every result is one JSON object per line on stdout; logs go to stderr.
//   produce STEP...  one producer runs the steps in order (a JVM and a client start once, ~3 s):
//       send:N          sync sends, keys k0..k(N-1), tag TagA
//       batch:N         one batch of N messages, keys b0..b(N-1)
//       orderly:N       sync sends to the queue chosen by key % queues (MessageQueueSelector)
//       delay:N:LEVEL   sync sends with delayTimeLevel LEVEL
//   transaction N SECONDS  a TransactionMQProducer sends N half messages each of keys tc<i> (committed at once),
//                   tr<i> (rolled back) and tu<i> (UNKNOW; the check-back commits it), then waits until every tu
//                   was checked or time ran out; one line per check: {"checked": key, "checkTimes": ...}
//   consume GROUP N SECONDS [retry]   push consumer from the first offset until N keys arrived or time ran out;
//                   with "retry", the first delivery of each message answers RECONSUME_LATER
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class JavaClientDriver {
    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void print(SendResult r, String key) {
        System.out.println("{\"key\":" + quote(key) + ",\"status\":" + quote(r.getSendStatus().name())
            + ",\"msgId\":" + quote(r.getMsgId()) + ",\"offsetMsgId\":" + quote(String.valueOf(r.getOffsetMsgId()))
            + ",\"queueId\":" + r.getMessageQueue().getQueueId() + ",\"queueOffset\":" + r.getQueueOffset()
            + ",\"broker\":" + quote(r.getMessageQueue().getBrokerName()) + "}");
    }

    static Message message(String topic, String key) {
        Message m = new Message(topic, "TagA", key, ("body-" + key).getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("driver", "java");
        return m;
    }

    public static void main(String[] args) throws Exception {
        String command = args[0], namesrv = args[1], topic = args[2];
        if (command.equals("consume")) {
            consume(namesrv, topic, args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]),
                args.length > 6 && args[6].equals("retry"));
            return;
        }
        if (command.equals("transaction")) {
            transaction(namesrv, topic, Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            return;
        }
        if (!command.equals("produce")) throw new IllegalArgumentException("unknown command " + command);
        DefaultMQProducer p = new DefaultMQProducer("JAVA_DRIVER_PG");
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10000);
        p.start();
        try {
            for (int a = 3; a < args.length; a++) step(p, topic, args[a].split(":"));
        } finally {
            p.shutdown();
        }
    }

    static void step(DefaultMQProducer p, String topic, String[] step) throws Exception {
        int n = Integer.parseInt(step[1]);
        switch (step[0]) {
            case "send":
                for (int i = 0; i < n; i++) print(p.send(message(topic, "k" + i)), "k" + i);
                break;
            case "batch": {
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < n; i++) batch.add(message(topic, "b" + i));
                print(p.send(batch), "batch");
                break;
            }
            case "orderly":
                for (int i = 0; i < n; i++) {
                    final int k = i;
                    print(p.send(message(topic, "o" + i), (mqs, msg, arg) -> mqs.get(k % mqs.size()), null), "o" + i);
                }
                break;
            case "delay":
                for (int i = 0; i < n; i++) {
                    Message m = message(topic, "d" + i);
                    m.setDelayTimeLevel(Integer.parseInt(step[2]));
                    print(p.send(m), "d" + i);
                }
                break;
            default:
                throw new IllegalArgumentException("unknown step " + step[0]);
        }
    }

    static void transaction(String namesrv, String topic, int n, int seconds) throws Exception {
        CountDownLatch checked = new CountDownLatch(n);
        TransactionMQProducer p = new TransactionMQProducer("JAVA_TX_PG");
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10000);
        p.setHeartbeatBrokerInterval(1000);  // the broker finds this producer's channel for its checks soon
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String k = msg.getKeys();
                return k.startsWith("tc") ? LocalTransactionState.COMMIT_MESSAGE
                    : k.startsWith("tr") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                System.out.println("{\"checked\":" + quote(msg.getKeys()) + ",\"checkTimes\":"
                    + quote(String.valueOf(msg.getProperty("TRANSACTION_CHECK_TIMES"))) + ",\"topic\":"
                    + quote(msg.getTopic()) + "}");
                if (msg.getKeys().startsWith("tu")) checked.countDown();
                return msg.getKeys().startsWith("tu") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        try {
            for (int i = 0; i < n; i++) {
                for (String prefix : new String[] {"tc", "tr", "tu"}) {
                    String key = prefix + i;
                    SendResult r = p.sendMessageInTransaction(message(topic, key), null);
                    print(r, key);
                }
            }
            boolean all = checked.await(seconds, TimeUnit.SECONDS);
            Thread.sleep(500);  // the last answers (oneway END_TRANSACTION) leave before the shutdown
            System.out.println("{\"allChecked\":" + all + "}");
        } finally {
            p.shutdown();
        }
    }

    static void consume(String namesrv, String topic, String group, int n, int seconds, boolean retry)
            throws Exception {
        Map<String, Integer> deliveries = new ConcurrentHashMap<>();
        Map<String, String> bodies = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(n);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setPollNameServerInterval(1000);  // find the retry topic's route in a second, not 30
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                int seen = deliveries.merge(m.getKeys(), 1, Integer::sum);
                if (retry && seen == 1) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                if (bodies.putIfAbsent(m.getKeys(), new String(m.getBody(), StandardCharsets.UTF_8)) == null) {
                    System.out.println("{\"key\":" + quote(m.getKeys()) + ",\"body\":"
                        + quote(bodies.get(m.getKeys())) + ",\"reconsumeTimes\":" + m.getReconsumeTimes()
                        + ",\"driver\":" + quote(String.valueOf(m.getUserProperty("driver")))
                        + ",\"queueId\":" + m.getQueueId() + ",\"queueOffset\":" + m.getQueueOffset() + "}");
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        boolean all = done.await(seconds, TimeUnit.SECONDS);
        c.shutdown();
        System.out.println("{\"done\":" + all + ",\"received\":" + bodies.size() + "}");
    }
}
