package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class CodecTest {
  @Test
  void writesTheBytesDataOutputStreamWrote() throws IOException {
    // Format 1 as the stream-based codec wrote it: a state value written before is read alike.
    ByteArrayOutputStream expected = new ByteArrayOutputStream();
    DataOutputStream d = new DataOutputStream(expected);
    byte[] blob = new byte[300]; // past the writer's first buffer
    for (int k = 0; k < blob.length; k++) {
      blob[k] = (byte) (k * 7);
    }
    d.writeByte(Codec.VERSION);
    d.writeByte(1);
    d.writeInt(-123456789);
    d.writeLong(Long.MIN_VALUE + 42);
    d.writeLong(Double.doubleToRawLongBits(-2.5));
    d.writeByte(0);
    d.writeByte(1);
    d.writeLong(7L);
    d.writeInt(-1);
    d.writeInt(blob.length);
    d.write(blob);
    byte[] text = "grüße".getBytes(StandardCharsets.UTF_8);
    d.writeInt(text.length);
    d.write(text);
    d.writeInt(-1);

    byte[] got =
        new Codec.Out()
            .bool(true)
            .i32(-123456789)
            .i64(Long.MIN_VALUE + 42)
            .f64(-2.5)
            .optLong(null)
            .optLong(7L)
            .bytes(null)
            .bytes(blob)
            .str("grüße")
            .str(null)
            .done();
    assertArrayEquals(expected.toByteArray(), got);

    Codec.In in = new Codec.In(got);
    assertEquals(true, in.bool());
    assertEquals(-123456789, in.i32());
    assertEquals(Long.MIN_VALUE + 42, in.i64());
    assertEquals(-2.5, in.f64());
    assertNull(in.optLong());
    assertEquals(7L, in.optLong());
    assertNull(in.bytes());
    assertArrayEquals(blob, in.bytes());
    assertEquals("grüße", in.str());
    assertNull(in.str());
  }

  @Test
  void refusesAnotherFormatAndAValueCutShort() {
    assertThrows(IllegalStateException.class, () -> new Codec.In(new byte[] {2}));
    byte[] cut = new Codec.Out().i64(5).done();
    Codec.In in = new Codec.In(java.util.Arrays.copyOf(cut, cut.length - 1));
    assertThrows(IllegalStateException.class, in::i64);
  }
}
