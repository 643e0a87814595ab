package io.headwater.enricher.state;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/** Message digests reused per thread: {@code MessageDigest.getInstance} searches the providers. */
final class Digests {
  private Digests() {}

  /**
   * One digest of {@code algorithm} per thread. A task thread runs one device at a time; callers
   * reset it before use, so reuse gives the same hashes as a fresh instance.
   */
  static ThreadLocal<MessageDigest> perThread(String algorithm) {
    return ThreadLocal.withInitial(
        () -> {
          try {
            return MessageDigest.getInstance(algorithm);
          } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JVM has " + algorithm, e);
          }
        });
  }
}
