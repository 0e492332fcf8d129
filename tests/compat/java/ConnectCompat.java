import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.debezium.transforms.ExtractNewRecordState;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
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
public final class ConnectCompat {
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private static final class Failure extends Exception {
    final String stage;

    Failure(String stage, String message) {
      super(message);
      this.stage = stage;
    }
  }

  private final JsonConverter keyConverter = new JsonConverter();
  private final JsonConverter valueConverter = new JsonConverter();
  private final Map<String, Object> smtConfig = new HashMap<>();

  private ConnectCompat() {
    Map<String, Object> conv = new HashMap<>();
    conv.put("schemas.enable", "true");
    conv.put("schemas.cache.size", "100000");
    keyConverter.configure(conv, true);
    valueConverter.configure(conv, false);
    smtConfig.put("delete.tombstone.handling.mode", "rewrite");
  }

  public static void main(String[] args) throws Exception {
    // answers own stdout; whatever the libraries log goes to stderr
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    System.setOut(System.err);
    ConnectCompat compat = new ConnectCompat();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      ObjectNode answer = MAPPER.createObjectNode();
      try {
        JsonNode request = MAPPER.readTree(line);
        answer.set("id", request.get("id"));
        compat.check(request);
        answer.put("ok", true);
      } catch (Failure f) {
        answer.put("ok", false);
        answer.put("stage", f.stage);
        answer.put("error", f.getMessage());
      } catch (Exception e) {
        answer.put("ok", false);
        answer.put("stage", "request");
        answer.put("error", describe(e));
      }
      out.println(MAPPER.writeValueAsString(answer));
      out.flush();
    }
  }

  private static String describe(Throwable e) {
    StringBuilder sb = new StringBuilder(e.getClass().getSimpleName() + ": " + e.getMessage());
    for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
      sb.append(" <- ").append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
    }
    return sb.toString();
  }

  private static byte[] text(JsonNode request, String name) {
    JsonNode node = request.get(name);
    return node == null || node.isNull() ? null : node.asText().getBytes(StandardCharsets.UTF_8);
  }

  private void check(JsonNode request) throws Exception {
    String topic = request.get("topic").asText();
    SchemaAndValue key = convert(keyConverter, "key", topic, text(request, "key"));
    SchemaAndValue value = convert(valueConverter, "value", topic, text(request, "value"));
    checkUnwrap(topic, key, value);
  }

  private static SchemaAndValue convert(JsonConverter converter, String part, String topic, byte[] bytes)
      throws Failure {
    SchemaAndValue data;
    try {
      data = converter.toConnectData(topic, bytes);
    } catch (Exception e) {
      throw new Failure(part + ".toConnectData", describe(e));
    }
    if (bytes == null) {
      return data;
    }
    byte[] back;
    try {
      back = converter.fromConnectData(topic, data.schema(), data.value());
    } catch (Exception e) {
      throw new Failure(part + ".fromConnectData", describe(e));
    }
    try {
      String diff = diff("", MAPPER.readTree(bytes), MAPPER.readTree(back));
      if (diff != null) {
        throw new Failure(part + ".roundtrip", diff);
      }
    } catch (java.io.IOException e) {
      throw new Failure(part + ".roundtrip", describe(e));
    }
    return data;
  }

  /** The first difference between two JSON trees, or null when they are equal. */
  private static String diff(String path, JsonNode want, JsonNode got) {
    if (want.isObject() && got.isObject()) {
      for (Iterator<String> it = want.fieldNames(); it.hasNext(); ) {
        String name = it.next();
        JsonNode other = got.get(name);
        if (other == null) {
          return path + "/" + name + ": dropped by fromConnectData (was " + clip(want.get(name)) + ")";
        }
        String d = diff(path + "/" + name, want.get(name), other);
        if (d != null) {
          return d;
        }
      }
      for (Iterator<String> it = got.fieldNames(); it.hasNext(); ) {
        String name = it.next();
        if (want.get(name) == null) {
          return path + "/" + name + ": added by fromConnectData (" + clip(got.get(name)) + ")";
        }
      }
      return null;
    }
    if (want.isArray() && got.isArray()) {
      if (want.size() != got.size()) {
        return path + ": " + want.size() + " items became " + got.size();
      }
      for (int i = 0; i < want.size(); i++) {
        String d = diff(path + "/" + i, want.get(i), got.get(i));
        if (d != null) {
          return d;
        }
      }
      return null;
    }
    if (want.equals(got)) {
      return null;
    }
    if (want.isNumber() && got.isNumber() && want.isFloatingPointNumber() && got.isFloatingPointNumber()
        && (float) want.doubleValue() == (float) got.doubleValue()
        && Float.isFinite((float) want.doubleValue())) {
      // a FLOAT32 field: JDK 17's Float.toString is not always the shortest decimal of the float
      // (2.27219554E15 where 2.2721955E15 reads back the same); both texts are the same float.
      // A double field round-trips exactly, so it never gets here.
      return null;
    }
    return path + ": " + clip(want) + " came back as " + clip(got);
  }

  private static String clip(JsonNode node) {
    String s = node.toString();
    return s.length() > 120 ? s.substring(0, 120) + "..." : s;
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

  private void checkUnwrap(String topic, SchemaAndValue key, SchemaAndValue value) throws Failure {
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
      throw new Failure("unwrap", describe(e));
    }
    if ("t".equals(op)) {
      return; // truncates have no row; the SMT may drop or pass them
    }
    if ("d".equals(op) && envelope.get("before") == null && (flat == null || flat.value() == null)) {
      return; // a delete without a before image (REPLICA IDENTITY NOTHING) has no row to rewrite
    }
    if (flat == null) {
      throw new Failure("unwrap", "op " + op + ": ExtractNewRecordState dropped the record");
    }
    Struct image = (Struct) envelope.get("d".equals(op) ? "before" : "after");
    if (image == null) {
      throw new Failure("unwrap", "op " + op + ": no " + ("d".equals(op) ? "before" : "after") + " image");
    }
    if (!(flat.value() instanceof Struct)) {
      throw new Failure("unwrap", "op " + op + ": flat value is " + flat.value());
    }
    Struct row = (Struct) flat.value();
    for (Field field : image.schema().fields()) {
      Object want = image.get(field);
      Object got;
      try {
        got = row.get(field.name());
      } catch (Exception e) {
        throw new Failure("unwrap", "field " + field.name() + ": " + describe(e));
      }
      if (!same(want, got)) {
        throw new Failure("unwrap", "field " + field.name() + ": " + want + " became " + got);
      }
    }
    expectField(row, "__op", op);
    String name = collection ? "collection" : "table";
    expectField(row, "__" + name, source == null ? null : source.get(name));
    expectField(row, "__source_ts_ms", source == null ? null : source.get("ts_ms"));
    expectField(row, "__deleted", "d".equals(op) ? "true" : "false");
  }

  private static void expectField(Struct row, String name, Object want) throws Failure {
    Object got;
    try {
      got = row.get(name);
    } catch (Exception e) {
      throw new Failure("unwrap", "added field " + name + ": " + describe(e));
    }
    if (!same(want, got)) {
      throw new Failure("unwrap", "added field " + name + ": want " + want + ", got " + got);
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
