package io.headwater.enricher.state;

/**
 * Event ids pinned when they were first published: Python's {@code str(uuid.uuid5(namespace,
 * json.dumps([tenant, device_id, message_id, index], separators=(",", ":"))))}, the definition
 * docs/enricher.md gives. They must never change.
 */
final class Expected {
  static final String ASCII = "e5ade5b8-8d13-53ea-b555-6c5ce6a0ecbe";
  static final String UNICODE = "bb320a65-8d2d-527b-9c0c-5b1faaa95afd";

  private Expected() {}
}
