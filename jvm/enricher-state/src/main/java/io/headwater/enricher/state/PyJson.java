package io.headwater.enricher.state;

/**
 * A string as Python's {@code json} module writes it with {@code ensure_ascii=True} (the
 * default): the name of an event id is hashed, so every byte must match Python's.
 */
final class PyJson {
  private PyJson() {}

  /** Appends {@code s} as a JSON string literal to {@code out}; returns {@code out}. */
  static StringBuilder string(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i); // UTF-16 units: astral characters become surrogate pairs, as Python's
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
