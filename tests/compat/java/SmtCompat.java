import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.transforms.Transformation;
import org.apache.kafka.connect.transforms.predicates.Predicate;

/**
 * Runs records through a chain of real Kafka Connect / Debezium transforms, as a Connect worker
 * runs a source connector's chain, and writes what comes out.
 *
 * <p>Reads one request per line on stdin, a list of runs:
 *
 * <pre>
 * {"id": ..., "runs": [{
 *   "transforms": [{"class": "...", "config": {...},
 *                   "predicate": {"class": "...", "config": {...}}, "negate": false}],
 *   "records": [{"topic": "...", "key": "JSON text"|null, "value": "JSON text"|null,
 *                "headers": [[name, text|null]]}]}]}
 * </pre>
 *
 * In each run, each record goes through JsonConverter (schemas.enable=true) into a SourceRecord
 * (its headers through SimpleHeaderConverter),
 * then through the transforms in order (a fresh instance of each per run; a step whose
 * predicate, after negate, is false is skipped), then back through JsonConverter; headers through
 * SimpleHeaderConverter (the Connect worker's default). Writes one line per request: {"id": ...,
 * "runs": [{"ok": true, "records": [{"topic", "key", "value", "headers": [[name, text|null]]}]}
 * or {"ok": false, "error": "..."}]}.
 */
public final class SmtCompat implements CompatSupport.Handler {
  private static final ObjectMapper MAPPER = CompatSupport.MAPPER;

  private final JsonConverter keyConverter = new JsonConverter();
  private final JsonConverter valueConverter = new JsonConverter();
  private final SimpleHeaderConverter headerConverter = new SimpleHeaderConverter();

  private SmtCompat() {
    Map<String, Object> conv = new HashMap<>();
    conv.put("schemas.enable", "true");
    keyConverter.configure(conv, true);
    valueConverter.configure(conv, false);
    headerConverter.configure(Map.of());
  }

  private static final class Step {
    final Transformation<SourceRecord> transform;
    final Predicate<SourceRecord> predicate;
    final boolean negate;

    Step(Transformation<SourceRecord> transform, Predicate<SourceRecord> predicate, boolean negate) {
      this.transform = transform;
      this.predicate = predicate;
      this.negate = negate;
    }
  }

  public static void main(String[] args) throws Exception {
    CompatSupport.serve(SmtCompat::new);
  }

  @Override
  public ObjectNode answer(String line) throws Exception {
    JsonNode request = MAPPER.readTree(line);
    ObjectNode answer = MAPPER.createObjectNode();
    answer.set("id", request.get("id"));
    ArrayNode runs = answer.putArray("runs");
    for (JsonNode run : request.get("runs")) {
      ObjectNode result = runs.addObject();
      try {
        result.set("records", run(run));
        result.put("ok", true);
      } catch (Exception e) {
        result.put("ok", false);
        result.put("error", CompatSupport.describe(e));
      }
    }
    return answer;
  }

  private static Map<String, Object> config(JsonNode node) {
    Map<String, Object> config = new HashMap<>();
    if (node != null) {
      for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        config.put(e.getKey(), e.getValue().asText());
      }
    }
    return config;
  }

  @SuppressWarnings("unchecked")
  private static <T> T instance(String className) throws Exception {
    return (T) Class.forName(className).getDeclaredConstructor().newInstance();
  }

  private static List<Step> steps(JsonNode specs) throws Exception {
    List<Step> steps = new ArrayList<>();
    for (JsonNode spec : specs) {
      Transformation<SourceRecord> transform = instance(spec.get("class").asText());
      transform.configure(config(spec.get("config")));
      Predicate<SourceRecord> predicate = null;
      JsonNode p = spec.get("predicate");
      if (p != null && !p.isNull()) {
        predicate = instance(p.get("class").asText());
        predicate.configure(config(p.get("config")));
      }
      steps.add(new Step(transform, predicate, spec.path("negate").asBoolean(false)));
    }
    return steps;
  }

  private static String text(byte[] bytes) {
    return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
  }

  private ArrayNode run(JsonNode run) throws Exception {
    List<Step> steps = steps(run.get("transforms"));
    ArrayNode results = MAPPER.createArrayNode();
    try {
      for (JsonNode input : run.get("records")) {
        String topic = input.get("topic").asText();
        SchemaAndValue key = keyConverter.toConnectData(topic, CompatSupport.bytes(input, "key"));
        SchemaAndValue value = valueConverter.toConnectData(topic, CompatSupport.bytes(input, "value"));
        SourceRecord record =
            new SourceRecord(Map.of(), Map.of(), topic, null, key.schema(), key.value(), value.schema(), value.value());
        for (JsonNode header : input.path("headers")) {
          String name = header.get(0).asText();
          byte[] raw = header.get(1).isNull() ? null : header.get(1).asText().getBytes(StandardCharsets.UTF_8);
          SchemaAndValue parsed = headerConverter.toConnectHeader(topic, name, raw);
          record.headers().add(name, parsed.value(), parsed.schema());
        }
        for (Step step : steps) {
          if (record == null) {
            break;
          }
          if (step.predicate == null || step.predicate.test(record) != step.negate) {
            record = step.transform.apply(record);
          }
        }
        if (record != null) {
          results.add(write(record));
        }
      }
    } finally {
      for (Step step : steps) {
        step.transform.close();
        if (step.predicate != null) {
          step.predicate.close();
        }
      }
    }
    return results;
  }

  private ObjectNode write(SourceRecord record) {
    String topic = record.topic();
    ObjectNode out = MAPPER.createObjectNode();
    out.put("topic", topic);
    out.put("key", text(keyConverter.fromConnectData(topic, record.keySchema(), record.key())));
    out.put("value", text(valueConverter.fromConnectData(topic, record.valueSchema(), record.value())));
    ArrayNode headers = out.putArray("headers");
    for (Header header : record.headers()) {
      ArrayNode pair = headers.addArray();
      pair.add(header.key());
      pair.add(text(headerConverter.fromConnectHeader(topic, header.key(), header.schema(), header.value())));
    }
    return out;
  }
}
