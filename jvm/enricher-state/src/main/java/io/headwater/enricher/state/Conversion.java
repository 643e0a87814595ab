package io.headwater.enricher.state;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/**
 * How one unit spelling converts to its canonical unit, computed by Python's units module (the
 * JVM has no unit library): {@code value * scale + offset}, or the error text when the spelling
 * cannot be converted.
 */
record Conversion(String canonical, double scale, double offset, String error) {
  private static final MathContext TWELVE = new MathContext(12, RoundingMode.HALF_EVEN);

  boolean failed() {
    return error != null && !error.isEmpty();
  }

  /**
   * Returns {@code value} in the canonical unit, rounded to 12 significant digits as units.convert
   * does ({@code float(f"{x:.12g}")}): float noise of a conversion must not leak into events, and
   * a Sparkplug B reading must get the value the same reading in another format gets.
   */
  double apply(double value) {
    if (scale == 1.0 && offset == 0.0) {
      return value;
    }
    double converted = value * scale + offset;
    if (!Double.isFinite(converted)) {
      return converted;
    }
    return Double.parseDouble(new BigDecimal(converted).round(TWELVE).toString());
  }
}
