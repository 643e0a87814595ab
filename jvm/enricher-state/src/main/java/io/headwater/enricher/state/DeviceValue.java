package io.headwater.enricher.state;

/**
 * A device's one composite state value (master data, snapshot, recent ids, parked count), read
 * once and written at most once per batch or timer: every state call costs a round trip.
 */
final class DeviceValue {
  record Master(String site, String areaCode, String vendorFormat, String model) {}

  Master master;
  Snapshot snapshot = new Snapshot();
  Dedup.Recent recent = Dedup.Recent.EMPTY;
  long[] spilledHours = new long[0];
  /** How many messages of the device are parked (0: no parked slot is ever read). */
  int parked;
  /**
   * The encoded bytes of the parked entries. Added after the first release: a value written
   * before has none and reads 0 until the next retry, which counts the list (and drains what
   * is over the limits).
   */
  long parkedBytes;
  /** The parked slots in use are within [parkedHead, parkedNext) (a slot may be empty). */
  long parkedHead;
  long parkedNext;
  /**
   * Whether the parked entries are still in the list of the layout before slots: a value
   * written before them has no head and next; its entries move on the device's next batch or
   * timer (DeviceLogic).
   */
  boolean parkedInList;
  /** Whether something other than the snapshot changed. */
  boolean changed;

  byte[] encode() {
    if (parkedInList && parked > 0) { // DeviceLogic moves them first: never left behind
      throw new IllegalStateException("parked entries not moved into slots");
    }
    Codec.Out o =
        new Codec.Out(512 + Dedup.Recent.ENTRY * recent.size() + 8 * spilledHours.length);
    o.bool(master != null);
    if (master != null) {
      o.str(master.site()).str(master.areaCode()).str(master.vendorFormat()).str(master.model());
    }
    snapshot.write(o);
    recent.write(o);
    o.i32(spilledHours.length);
    for (long h : spilledHours) {
      o.i64(h);
    }
    o.i32(parked);
    o.i64(parkedBytes);
    o.i64(parkedHead).i64(parkedNext);
    return o.done();
  }

  static DeviceValue decode(byte[] bytes) {
    DeviceValue d = new DeviceValue();
    if (bytes == null) {
      return d;
    }
    Codec.In i = new Codec.In(bytes);
    if (i.bool()) {
      d.master = new Master(i.str(), i.str(), i.str(), i.str());
    }
    d.snapshot = Snapshot.read(i);
    d.recent = Dedup.Recent.read(i);
    d.spilledHours = new long[i.i32()];
    for (int k = 0; k < d.spilledHours.length; k++) {
      d.spilledHours[k] = i.i64();
    }
    d.parked = i.i32();
    d.parkedBytes = i.more() ? i.i64() : 0;
    d.parkedInList = !i.more();
    if (!d.parkedInList) {
      d.parkedHead = i.i64();
      d.parkedNext = i.i64();
    }
    return d;
  }
}
