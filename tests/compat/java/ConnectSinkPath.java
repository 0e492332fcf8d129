import io.debezium.transforms.ExtractNewRecordState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.file.FileStreamSinkTask;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.sink.SinkRecord;

/**
 * A Kafka Connect sink path built from Connect's own components, as a Connect worker runs a sink
 * connector: a kafka-clients consumer, then JsonConverter (schemas.enable=true) for keys and
 * values, then Debezium's ExtractNewRecordState (delete.tombstone.handling.mode=rewrite,
 * add.fields=op,table,source.ts_ms), then FileStreamSinkTask writing one line per row.
 *
 * <p>Args: bootstrap group topic[,topic...] outFile idleMillis. Reads from the earliest offsets
 * until a poll returns nothing for idleMillis (the local broker's high watermarks cannot be
 * trusted), then prints one JSON line: {"consumed": n, "converted": n, "written": n, "errors": n}
 * and, on stderr, each error with its topic/partition/offset.
 */
public final class ConnectSinkPath {
  private ConnectSinkPath() {}

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String group = args[1];
    List<String> topics = Arrays.asList(args[2].split(","));
    String outFile = args[3];
    long idleMillis = Long.parseLong(args[4]);

    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("group.id", group);
    props.put("auto.offset.reset", "earliest");
    props.put("enable.auto.commit", "false");
    props.put("session.timeout.ms", "6000");
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());

    Map<String, Object> conv = new HashMap<>();
    conv.put("schemas.enable", "true");
    JsonConverter keyConverter = new JsonConverter();
    keyConverter.configure(conv, true);
    JsonConverter valueConverter = new JsonConverter();
    valueConverter.configure(conv, false);

    ExtractNewRecordState<SinkRecord> unwrap = new ExtractNewRecordState<>();
    Map<String, Object> smt = new HashMap<>();
    smt.put("delete.tombstone.handling.mode", "rewrite");
    smt.put("add.fields", "op,table,source.ts_ms");
    unwrap.configure(smt);

    FileStreamSinkTask task = new FileStreamSinkTask();
    Map<String, String> taskProps = new HashMap<>();
    taskProps.put("file", outFile);
    task.start(taskProps);

    long consumed = 0;
    long converted = 0;
    long written = 0;
    long errors = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(topics);
      long lastData = System.currentTimeMillis();
      boolean seenAny = false;
      while (true) {
        ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
        if (batch.isEmpty()) {
          // before the first record the group may still be joining: wait longer then
          long limit = seenAny ? idleMillis : Math.max(idleMillis, 60_000);
          if (System.currentTimeMillis() - lastData > limit) {
            break;
          }
          continue;
        }
        seenAny = true;
        lastData = System.currentTimeMillis();
        List<SinkRecord> rows = new ArrayList<>();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : batch) {
          consumed++;
          offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
          try {
            SchemaAndValue key = keyConverter.toConnectData(r.topic(), r.key());
            SchemaAndValue value = valueConverter.toConnectData(r.topic(), r.value());
            converted++;
            SinkRecord record =
                new SinkRecord(
                    r.topic(), r.partition(), key.schema(), key.value(), value.schema(), value.value(),
                    r.offset(), r.timestamp(), TimestampType.CREATE_TIME);
            SinkRecord flat = unwrap.apply(record);
            if (flat != null && flat.value() != null) {
              rows.add(flat);
            }
          } catch (Exception e) {
            errors++;
            System.err.println(
                "error " + r.topic() + "[" + r.partition() + "]@" + r.offset() + ": " + e);
          }
        }
        task.put(rows);
        task.flush(offsets);
        written += rows.size();
        consumer.commitSync(offsets);
      }
    } finally {
      task.stop();
      unwrap.close();
    }
    System.out.println(
        "{\"consumed\": " + consumed + ", \"converted\": " + converted + ", \"written\": " + written
            + ", \"errors\": " + errors + "}");
  }
}
