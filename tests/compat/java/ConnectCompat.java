import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.debezium.transforms.ExtractNewRecordState;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Checks canonical records against the real Kafka Connect and Debezium runtime.
 *
 * <p>Reads one request per line on stdin: {"id": ..., "topic": "...", "key": "<JSON text>"|null,
 * "value": "<JSON text>"|null}. Writes one answer per line on stdout: {"id": ..., "ok": true} or
 * {"id": ..., "ok": false, "stage": "...", "error": "..."}. The stages, in order:
 *
 * <ol>
 *   <li>key.toConnectData / value.toConnectData: JsonConverter with schemas.enable=true accepts it;
 *   <li>key.roundtrip / value.roundtrip: fromConnectData writes the same JSON back;
 *   <li>unwrap: Debezium's ExtractNewRecordState (delete.tombstone.handling.mode=rewrite,
 *       add.fields=op,table,source.ts_ms) yields a flat row equal to after (before for deletes).
 * </ol>
 */
public final class ConnectCompat implements CompatSupport.Check {
  private static final ObjectMapper MAPPER = CompatSupport.MAPPER;
  private static final CompatSupport.Diff DIFF =
      new CompatSupport.Diff("dropped by fromConnectData", "added by fromConnectData", 120);

  private final JsonConverter keyConverter = CompatSupport.jsonWithSchemas(true);
  private final JsonConverter valueConverter = CompatSupport.jsonWithSchemas(false);
  private final Map<String, Object> smtConfig = new HashMap<>();

  private ConnectCompat() {
    smtConfig.put("delete.tombstone.handling.mode", "rewrite");
  }

  public static void main(String[] args) throws Exception {
    CompatSupport.serveChecks(ConnectCompat::new);
  }

  @Override
  public void check(JsonNode request, ObjectNode answer) throws Exception {
    String topic = request.get("topic").asText();
    SchemaAndValue key = convert(keyConverter, "key", topic, CompatSupport.bytes(request, "key"));
    SchemaAndValue value = convert(valueConverter, "value", topic, CompatSupport.bytes(request, "value"));
    checkUnwrap(topic, key, value);
  }

  private static SchemaAndValue convert(JsonConverter converter, String part, String topic, byte[] bytes)
      throws CompatSupport.Failure {
    SchemaAndValue data;
    try {
      data = converter.toConnectData(topic, bytes);
    } catch (Exception e) {
      throw new CompatSupport.Failure(part + ".toConnectData", CompatSupport.describe(e));
    }
    if (bytes == null) {
      return data;
    }
    byte[] back;
    try {
      back = converter.fromConnectData(topic, data.schema(), data.value());
    } catch (Exception e) {
      throw new CompatSupport.Failure(part + ".fromConnectData", CompatSupport.describe(e));
    }
    try {
      String diff = DIFF.first(MAPPER.readTree(bytes), MAPPER.readTree(back));
      if (diff != null) {
        throw new CompatSupport.Failure(part + ".roundtrip", diff);
      }
    } catch (java.io.IOException e) {
      throw new CompatSupport.Failure(part + ".roundtrip", CompatSupport.describe(e));
    }
    return data;
  }

  /**
   * A fresh ExtractNewRecordState per record: the SMT caches the flat schema by the row schema, so
   * one record's source field types would otherwise decide another's (MongoDB's source block
   * names a collection, not a table: add.fields=op,collection,source.ts_ms there).
   */
  private ExtractNewRecordState<SourceRecord> unwrap(String tableField) {
    ExtractNewRecordState<SourceRecord> smt = new ExtractNewRecordState<>();
    Map<String, Object> config = new HashMap<>(smtConfig);
    config.put("add.fields", "op," + tableField + ",source.ts_ms");
    smt.configure(config);
    return smt;
  }

  private void checkUnwrap(String topic, SchemaAndValue key, SchemaAndValue value) throws CompatSupport.Failure {
    Schema schema = value.schema();
    if (!(value.value() instanceof Struct) || schema == null || schema.name() == null
        || !schema.name().endsWith(".Envelope")) {
      return; // a tombstone, schema change or transaction record: not a row change
    }
    Struct envelope = (Struct) value.value();
    String op = envelope.getString("op");
    Struct source = envelope.getStruct("source");
    boolean collection =
        source != null && source.schema().field("table") == null && source.schema().field("collection") != null;
    SourceRecord record =
        new SourceRecord(
            Map.of(), Map.of(), topic, 0, key.schema(), key.value(), schema, envelope);
    SourceRecord flat;
    try {
      flat = unwrap(collection ? "collection" : "table").apply(record);
    } catch (Exception e) {
      throw new CompatSupport.Failure("unwrap", CompatSupport.describe(e));
    }
    if ("t".equals(op)) {
      return; // truncates have no row; the SMT may drop or pass them
    }
    if ("d".equals(op) && envelope.get("before") == null && (flat == null || flat.value() == null)) {
      return; // a delete without a before image (REPLICA IDENTITY NOTHING) has no row to rewrite
    }
    if (flat == null) {
      throw new CompatSupport.Failure("unwrap", "op " + op + ": ExtractNewRecordState dropped the record");
    }
    Struct image = (Struct) envelope.get("d".equals(op) ? "before" : "after");
    if (image == null) {
      throw new CompatSupport.Failure(
          "unwrap", "op " + op + ": no " + ("d".equals(op) ? "before" : "after") + " image");
    }
    if (!(flat.value() instanceof Struct)) {
      throw new CompatSupport.Failure("unwrap", "op " + op + ": flat value is " + flat.value());
    }
    Struct row = (Struct) flat.value();
    for (Field field : image.schema().fields()) {
      Object want = image.get(field);
      Object got;
      try {
        got = row.get(field.name());
      } catch (Exception e) {
        throw new CompatSupport.Failure("unwrap", "field " + field.name() + ": " + CompatSupport.describe(e));
      }
      if (!same(want, got)) {
        throw new CompatSupport.Failure("unwrap", "field " + field.name() + ": " + want + " became " + got);
      }
    }
    expectField(row, "__op", op);
    String name = collection ? "collection" : "table";
    expectField(row, "__" + name, source == null ? null : source.get(name));
    expectField(row, "__source_ts_ms", source == null ? null : source.get("ts_ms"));
    expectField(row, "__deleted", "d".equals(op) ? "true" : "false");
  }

  private static void expectField(Struct row, String name, Object want) throws CompatSupport.Failure {
    Object got;
    try {
      got = row.get(name);
    } catch (Exception e) {
      throw new CompatSupport.Failure("unwrap", "added field " + name + ": " + CompatSupport.describe(e));
    }
    if (!same(want, got)) {
      throw new CompatSupport.Failure("unwrap", "added field " + name + ": want " + want + ", got " + got);
    }
  }

  private static boolean same(Object want, Object got) {
    if (want instanceof ByteBuffer wb && got instanceof ByteBuffer gb) {
      return wb.equals(gb);
    }
    if (want instanceof byte[] wa && got instanceof byte[] ga) {
      return Arrays.equals(wa, ga);
    }
    return Objects.deepEquals(want, got);
  }
}
