package io.headwater.enricher.state;

/** A message whose content cannot become an event; {@code reason} is the dead-letter reason. */
final class NormalizeException extends Exception {
  private static final long serialVersionUID = 1L;
  final String reason;
  final String stage;

  NormalizeException(String stage, String reason, String message) {
    super(message, null, false, false); // data, not a bug: no stack trace to fill
    this.stage = stage;
    this.reason = reason;
  }

  /**
   * The class name dead letters carry: "NormalizeError", as the Python hop names its own
   * rejections of a payload; a name of its own for each of the JVM's own bounds.
   */
  String errorClass() {
    return switch (reason) {
      case "DEFINITIONS_LIMIT" -> "DefinitionsLimitError";
      case "EVENT_TOO_LARGE" -> "EventTooLargeError";
      default -> "NormalizeError";
    };
  }
}
