package io.headwater.enricher.state;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.UUID;

/**
 * Event ids: UUIDv5 of a fixed namespace and a JSON name, exactly as
 * services/enricher/python_operator/enrich.py {@code event_id} computes them, so events keep their
 * ids whichever operator built them.
 */
public final class EventIds {
  /** enrich.EVENT_ID_NAMESPACE. */
  static final UUID NAMESPACE = UUID.fromString("5b0e3d0c-8f4b-5a3e-9c52-6865616477a1");

  private static final byte[] NAMESPACE_BYTES = uuidBytes(NAMESPACE);

  private static final ThreadLocal<MessageDigest> SHA1 = Digests.perThread("SHA-1");

  private EventIds() {}

  /** Returns the id of event {@code index} of a message of {@code deviceId} in {@code tenant}. */
  public static String of(String tenant, String deviceId, String messageId, int index) {
    StringBuilder name = new StringBuilder("[");
    PyJson.string(name, tenant).append(',');
    PyJson.string(name, deviceId).append(',');
    PyJson.string(name, messageId).append(',').append(index).append(']');
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
}
