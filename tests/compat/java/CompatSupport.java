import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.Callable;
import org.apache.kafka.connect.json.JsonConverter;

/**
 * What the checkers fed over stdin share (compiled with each of them; tests/compat/runtime.py's
 * JsonLinesJvm is the other end): the loop that answers one JSON line on stdout per request line
 * on stdin, the answer of a check that names the stage that failed, the first difference between
 * two JSON trees, and the JsonConverter that reads and writes the JSON-with-schema form.
 */
final class CompatSupport {
  static final ObjectMapper MAPPER = new ObjectMapper();

  private CompatSupport() {}

  /** Answers one request line (not blank) with one JSON object. */
  interface Handler {
    ObjectNode answer(String line) throws Exception;
  }

  /** Checks one request: returns when it passes, throws {@link Failure} naming the stage that refused it. */
  interface Check {
    void check(JsonNode request, ObjectNode answer) throws Exception;
  }

  /** A check that failed at a stage. */
  static final class Failure extends Exception {
    final String stage;

    Failure(String stage, String message) {
      super(message);
      this.stage = stage;
    }
  }

  /**
   * Answers stdin's lines until it closes, skipping blank ones. The answers own stdout: from
   * before {@code start} builds the handler, whatever the libraries print goes to stderr.
   */
  static void serve(Callable<? extends Handler> start) throws Exception {
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    System.setOut(System.err);
    Handler handler = start.call();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      out.println(MAPPER.writeValueAsString(handler.answer(line)));
      out.flush();
    }
  }

  /**
   * {@link #serve} for a check: each answer is {"id": ..., "ok": true} (with what the check put in
   * it), {"id": ..., "ok": false, "stage": ..., "error": ...} for a {@link Failure}, or stage
   * "request" for any other exception (a line that is not JSON: no id).
   */
  static void serveChecks(Callable<? extends Check> start) throws Exception {
    serve(() -> {
      Check check = start.call();
      return line -> answer(check, line);
    });
  }

  private static ObjectNode answer(Check check, String line) {
    ObjectNode answer = MAPPER.createObjectNode();
    try {
      JsonNode request = MAPPER.readTree(line);
      answer.set("id", request.get("id"));
      check.check(request, answer);
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
    return answer;
  }

  /** Connect's JsonConverter for keys or values with schemas.enable=true (a schema cache of 100000). */
  static JsonConverter jsonWithSchemas(boolean isKey) {
    JsonConverter converter = new JsonConverter();
    converter.configure(Map.of("schemas.enable", "true", "schemas.cache.size", "100000"), isKey);
    return converter;
  }

  /** An exception and its causes, one {@code Class: message} each, joined by " <- ". */
  static String describe(Throwable e) {
    StringBuilder sb = new StringBuilder(e.getClass().getSimpleName() + ": " + e.getMessage());
    for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
      sb.append(" <- ").append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
    }
    return sb.toString();
  }

  /** A field's text, or null when it is absent or JSON null. */
  static String text(JsonNode node, String name) {
    JsonNode field = node.get(name);
    return field == null || field.isNull() ? null : field.asText();
  }

  /** A field's text as UTF-8 bytes, or null when it is absent or JSON null. */
  static byte[] bytes(JsonNode node, String name) {
    String text = text(node, name);
    return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * The first difference between two JSON trees, in the words of one round trip: a field of
   * {@code want} that {@code got} lacks is "{@code missing} (was ...)", one only {@code got} has is
   * "{@code added} (...)"; values shown are clipped to {@code clipAt} characters.
   */
  record Diff(String missing, String added, int clipAt) {
    /** The first difference, or null when the trees are equal. */
    String first(JsonNode want, JsonNode got) {
      return at("", want, got);
    }

    private String at(String path, JsonNode want, JsonNode got) {
      if (want.isObject() && got.isObject()) {
        for (Iterator<String> it = want.fieldNames(); it.hasNext(); ) {
          String name = it.next();
          JsonNode other = got.get(name);
          if (other == null) {
            return path + "/" + name + ": " + missing + " (was " + clip(want.get(name)) + ")";
          }
          String d = at(path + "/" + name, want.get(name), other);
          if (d != null) {
            return d;
          }
        }
        for (Iterator<String> it = got.fieldNames(); it.hasNext(); ) {
          String name = it.next();
          if (want.get(name) == null) {
            return path + "/" + name + ": " + added + " (" + clip(got.get(name)) + ")";
          }
        }
        return null;
      }
      if (want.isArray() && got.isArray()) {
        if (want.size() != got.size()) {
          return path + ": " + want.size() + " items became " + got.size();
        }
        for (int i = 0; i < want.size(); i++) {
          String d = at(path + "/" + i, want.get(i), got.get(i));
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

    private String clip(JsonNode node) {
      String s = node.toString();
      return s.length() > clipAt ? s.substring(0, clipAt) + "..." : s;
    }
  }
}
