package io.headwater.enricher.state;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.UUID;

/**
 * Event ids: UUIDv5 (RFC 9562) of a fixed namespace and the JSON name {@code [tenant, device_id,
 * message_id, index]}, as docs/enricher.md states. Message ids are unique per tenant and device
 * only, so the id is derived from all three; JSON, so that no choice of the parts can collide
 * with another's ("a/b" + "c" versus "a" + "b/c"). The name's bytes are fixed (compact, every
 * character outside printable ASCII as a four-digit hex escape): a replay, or a later release,
 * must give an event the id it had.
 */
public final class EventIds {
  /** The namespace of every event id (never changes). */
  static final UUID NAMESPACE = UUID.fromString("5b0e3d0c-8f4b-5a3e-9c52-6865616477a1");

  private static final byte[] NAMESPACE_BYTES = uuidBytes(NAMESPACE);

  private static final ThreadLocal<MessageDigest> SHA1 = Digests.perThread("SHA-1");

  private EventIds() {}

  /** Returns the id of event {@code index} of a message of {@code deviceId} in {@code tenant}. */
  public static String of(String tenant, String deviceId, String messageId, int index) {
    StringBuilder name = new StringBuilder("[");
    jsonString(name, tenant).append(',');
    jsonString(name, deviceId).append(',');
    jsonString(name, messageId).append(',').append(index).append(']');
    MessageDigest sha1 = SHA1.get();
    sha1.reset();
    sha1.update(NAMESPACE_BYTES);
    byte[] h = sha1.digest(name.toString().getBytes(StandardCharsets.UTF_8));
    h[6] = (byte) ((h[6] & 0x0f) | 0x50); // version 5
    h[8] = (byte) ((h[8] & 0x3f) | 0x80); // RFC 9562 variant
    String x = HexFormat.of().formatHex(h, 0, 16);
    return x.substring(0, 8) + "-" + x.substring(8, 12) + "-" + x.substring(12, 16) + "-"
        + x.substring(16, 20) + "-" + x.substring(20);
  }

  private static byte[] uuidBytes(UUID u) {
    byte[] out = new byte[16];
    long hi = u.getMostSignificantBits();
    long lo = u.getLeastSignificantBits();
    for (int i = 0; i < 8; i++) {
      out[i] = (byte) (hi >>> (56 - 8 * i));
      out[8 + i] = (byte) (lo >>> (56 - 8 * i));
    }
    return out;
  }

  /** Appends {@code s} as a JSON string literal of the name's spelling; returns {@code out}. */
  private static StringBuilder jsonString(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i); // UTF-16 units: an astral character is two escapes
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        case '\b' -> out.append("\\b");
        case '\f' -> out.append("\\f");
        default -> {
          if (c >= 0x20 && c <= 0x7e) {
            out.append(c);
          } else {
            out.append(String.format("\\u%04x", (int) c));
          }
        }
      }
    }
    return out.append('"');
  }
}
