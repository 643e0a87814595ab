package io.headwater.enricher.state;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * The state's binary layout: length-prefixed fields with a null marker. One format version byte
 * heads every value, so a later layout can read (or refuse) an older one.
 */
final class Codec {
  static final byte VERSION = 1;

  private Codec() {}

  /** A writer of one state value. */
  static final class Out {
    private final ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
    private final DataOutputStream out = new DataOutputStream(bytes);

    Out() {
      u8(VERSION);
    }

    Out u8(int v) {
      try {
        out.writeByte(v);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return this;
    }

    Out i32(int v) {
      try {
        out.writeInt(v);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return this;
    }

    Out i64(long v) {
      try {
        out.writeLong(v);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return this;
    }

    Out f64(double v) {
      return i64(Double.doubleToRawLongBits(v));
    }

    Out bool(boolean v) {
      return u8(v ? 1 : 0);
    }

    Out optLong(Long v) {
      bool(v != null);
      return v == null ? this : i64(v);
    }

    Out bytes(byte[] v) {
      if (v == null) {
        return i32(-1);
      }
      i32(v.length);
      try {
        out.write(v);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return this;
    }

    Out str(String v) {
      return bytes(v == null ? null : v.getBytes(StandardCharsets.UTF_8));
    }

    byte[] done() {
      return bytes.toByteArray();
    }
  }

  /** A reader of one state value. */
  static final class In {
    private final DataInputStream in;

    In(byte[] value) {
      in = new DataInputStream(new ByteArrayInputStream(value));
      int version = u8();
      if (version != VERSION) {
        throw new IllegalStateException(
            "state value of format " + version + ", this operator reads " + VERSION
                + ": start from a new checkpoint (docs/enricher.md, upgrading)");
      }
    }

    int u8() {
      try {
        return in.readUnsignedByte();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    int i32() {
      try {
        return in.readInt();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    long i64() {
      try {
        return in.readLong();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    double f64() {
      return Double.longBitsToDouble(i64());
    }

    boolean bool() {
      return u8() != 0;
    }

    Long optLong() {
      return bool() ? i64() : null;
    }

    byte[] bytes() {
      int n = i32();
      if (n < 0) {
        return null;
      }
      byte[] b = new byte[n];
      try {
        in.readFully(b);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return b;
    }

    String str() {
      byte[] b = bytes();
      return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }
  }
}
