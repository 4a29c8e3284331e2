// RocketMQ 4.9.8's BloomFilter (rocketmq-filter: BloomFilter.createByFn and calcBitPositions over Guava's
// murmur3_128), run as an oracle: each stdin line is "f n text" (text may hold spaces); each stdout line is
// "k m p1 p2 ... pk", the filter's hash count, bit count and the text's bit positions.
// Usage: java -cp "$ROCKETMQ_HOME/lib/*" tests/java/BloomPositions.java < lines
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.filter.util.BloomFilter;

public class BloomPositions {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split(" ", 3);
            BloomFilter bf = BloomFilter.createByFn(Integer.parseInt(parts[0]), Integer.parseInt(parts[1]));
            StringBuilder out = new StringBuilder();
            out.append(bf.getK()).append(' ').append(bf.getM());
            for (int p : bf.calcBitPositions(parts.length > 2 ? parts[2] : "")) {
                out.append(' ').append(p);
            }
            System.out.println(out);
        }
    }
}
