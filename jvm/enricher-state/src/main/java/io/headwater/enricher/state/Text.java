package io.headwater.enricher.state;

/** Text helpers that reproduce what Python writes (error messages land in dead letters). */
final class Text {
  private Text() {}

  /** {@code bytes.decode("ascii", "replace")}: every byte above 127 becomes U+FFFD. */
  static String ascii(byte[] v) {
    StringBuilder s = new StringBuilder(v.length);
    for (byte b : v) {
      s.append(b >= 0 ? (char) b : '\ufffd');
    }
    return s.toString();
  }

  /** Python's {@code repr} of a str, for the characters ids hold (quotes and escapes). */
  static String repr(String s) {
    char quote = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder out = new StringBuilder().append(quote);
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == quote || c == '\\') {
        out.append('\\').append(c);
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c == '\t') {
        out.append("\\t");
      } else if (c < 0x20 || c == 0x7f) {
        out.append(String.format("\\x%02x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append(quote).toString();
  }

  /** The first {@code n} code points of {@code s} (Python's {@code s[:n]}). */
  static String head(String s, int n) {
    if (s.codePointCount(0, s.length()) <= n) {
      return s;
    }
    return s.substring(0, s.offsetByCodePoints(0, n));
  }

  /** A double as Python's {@code str(float)} writes the non-finite ones. */
  static String pyFloat(double v) {
    if (Double.isNaN(v)) {
      return "nan";
    }
    if (Double.isInfinite(v)) {
      return v > 0 ? "inf" : "-inf";
    }
    return Double.toString(v);
  }
}
