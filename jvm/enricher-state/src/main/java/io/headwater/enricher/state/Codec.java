package io.headwater.enricher.state;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The state's binary layout: length-prefixed fields with a null marker, big-endian (the layout of
 * {@code DataOutputStream}). One format version byte heads every value, so a later layout can
 * read (or refuse) an older one.
 *
 * <p>Written and read straight from a byte array: a device's value carries its recent ids (20
 * bytes each), read and written once per batch, and a stream's byte-at-a-time calls through
 * synchronized methods made that a third of the operator's task time.
 */
final class Codec {
  static final byte VERSION = 1;

  private Codec() {}

  // Big-endian views of byte arrays: one (intrinsified) access per field, not byte by byte.
  private static final VarHandle LONG =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
  private static final VarHandle INT =
      MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);

  /** The big-endian long at {@code at} of {@code b}. */
  static long i64(byte[] b, int at) {
    return (long) LONG.get(b, at);
  }

  static int i32(byte[] b, int at) {
    return (int) INT.get(b, at);
  }

  static void i64(byte[] b, int at, long v) {
    LONG.set(b, at, v);
  }

  static void i32(byte[] b, int at, int v) {
    INT.set(b, at, v);
  }

  /** A writer of one state value. */
  static final class Out {
    private byte[] buf;
    private int n;

    Out() {
      this(256);
    }

    /** A writer whose first buffer holds {@code sizeHint} bytes (it grows past them). */
    Out(int sizeHint) {
      buf = new byte[Math.max(16, sizeHint)];
      u8(VERSION);
    }

    private void room(int more) {
      if (n + more > buf.length) {
        buf = Arrays.copyOf(buf, Math.max(buf.length * 2, n + more));
      }
    }

    Out u8(int v) {
      room(1);
      buf[n++] = (byte) v;
      return this;
    }

    Out i32(int v) {
      room(4);
      Codec.i32(buf, n, v);
      n += 4;
      return this;
    }

    Out i64(long v) {
      room(8);
      Codec.i64(buf, n, v);
      n += 8;
      return this;
    }

    /** {@code len} bytes of {@code src} from {@code off}, as they are (no length prefix). */
    Out raw(byte[] src, int off, int len) {
      room(len);
      System.arraycopy(src, off, buf, n, len);
      n += len;
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
      room(v.length);
      System.arraycopy(v, 0, buf, n, v.length);
      n += v.length;
      return this;
    }

    Out str(String v) {
      return bytes(v == null ? null : v.getBytes(StandardCharsets.UTF_8));
    }

    byte[] done() {
      return Arrays.copyOf(buf, n);
    }
  }

  /** A reader of one state value. */
  static final class In {
    private final byte[] b;
    private int p;

    In(byte[] value) {
      b = value;
      int version = u8();
      if (version != VERSION) {
        throw new IllegalStateException(
            "state value of format " + version + ", this operator reads " + VERSION
                + ": start from a new checkpoint (docs/enricher.md, upgrading)");
      }
    }

    private void need(int k) {
      if (k < 0 || k > b.length - p) {
        throw new IllegalStateException("state value cut short: " + b.length + " bytes");
      }
    }

    int u8() {
      need(1);
      return b[p++] & 0xff;
    }

    int i32() {
      need(4);
      int v = Codec.i32(b, p);
      p += 4;
      return v;
    }

    long i64() {
      need(8);
      long v = Codec.i64(b, p);
      p += 8;
      return v;
    }

    /** Skips {@code len} bytes (checked) and returns where they start in {@link #array()}. */
    int skip(int len) {
      need(len);
      int at = p;
      p += len;
      return at;
    }

    /** Whether bytes remain: a field added later is absent from a value written before. */
    boolean more() {
      return p < b.length;
    }

    /** The value's bytes, as given (not copied). */
    byte[] array() {
      return b;
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
      int len = i32();
      if (len < 0) {
        return null;
      }
      need(len);
      byte[] out = Arrays.copyOfRange(b, p, p + len);
      p += len;
      return out;
    }

    String str() {
      int len = i32();
      if (len < 0) {
        return null;
      }
      need(len);
      String s = new String(b, p, len, StandardCharsets.UTF_8);
      p += len;
      return s;
    }
  }
}
