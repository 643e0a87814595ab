package io.headwater.enricher.state;

/** Values Python computed (enrich.event_id), so the JVM port is checked against the original. */
final class Expected {
  static final String ASCII = "e5ade5b8-8d13-53ea-b555-6c5ce6a0ecbe";
  static final String UNICODE = "bb320a65-8d2d-527b-9c0c-5b1faaa95afd";

  private Expected() {}
}
