package io.headwater.enricher.state;

/** One parked message in state: when it may run again, which attempt ran last, and why. */
record Parked(long notBeforeMs, int attempt, String reason, Message message) {
  byte[] encode() {
    Codec.Out o = new Codec.Out().i64(notBeforeMs).i32(attempt).str(reason);
    MessageCodec.write(o, message);
    return o.done();
  }

  static Parked decode(byte[] value) {
    Codec.In i = new Codec.In(value);
    return new Parked(i.i64(), i.i32(), i.str(), MessageCodec.read(i));
  }
}
