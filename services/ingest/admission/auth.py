"""Gateway authentication and the device binding of each gateway.

Gateways present ``authorization: Bearer <token>`` metadata, an mTLS client certificate
whose common name is the gateway id, or both. The tokens file (mounted from a Kubernetes
Secret) stores only SHA-256 hashes of tokens and binds each gateway to a tenant and to
the device ids it may speak for (shell-style patterns). The file is re-read when it
changes (a Secret update swaps the file under the mount), checked at most once a second.
A file that cannot be read, decoded or parsed is logged and ignored: the previous table
stays in force. Each table installed bumps the store's ``generation``, so open streams
re-resolve their gateway at their next frame (revocation and binding changes bite at
once) and skip the work while nothing changed.

Tokens file format (YAML)::

    gateways:
      - id: gw-001
        tenant: acme
        token_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        devices: ["acme-*"]
        revoked: false
        # Optional overrides of the per-gateway limits (docs/operations.md, "Ingest overload"):
        rate_bytes_per_second: 8388608   # HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND
        max_inflight_bytes: 4194304      # HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES
        max_concurrent_rpcs: 128         # HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS
        max_streams: 8                   # HEADWATER_INGEST_GATEWAY_MAX_STREAMS
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from headwater.errors import HeadwaterError
from headwater.ingest.errors import UnauthenticatedError

log = logging.getLogger(__name__)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Gateway:
    """A gateway's identity and what it may do."""

    gateway_id: str
    tenant: str
    device_patterns: tuple[str, ...]
    token_sha256: str = ""
    revoked: bool = False
    #: Per-gateway limits from the tokens file; None: the process defaults apply, 0: none.
    rate_bytes_per_second: int | None = None
    max_inflight_bytes: int | None = None
    max_concurrent_rpcs: int | None = None
    max_streams: int | None = None
    #: ``device_patterns`` as one regular expression (fnmatch's translation of each), so a
    #: message's binding check is one match, not a matcher looked up per pattern (issue 40).
    _devices: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        patterns = "|".join(fnmatch.translate(p) for p in self.device_patterns)
        object.__setattr__(self, "_devices", re.compile(patterns) if patterns else None)

    def may_speak_for(self, device_id: str) -> bool:
        """Return True if this gateway is bound to ``device_id`` (``write/messages.py`` asks)."""
        return self._devices is not None and self._devices.match(device_id) is not None


#: The identity of calls on a server started with HEADWATER_INGEST_ALLOW_UNAUTHENTICATED.
ANONYMOUS = Gateway("anonymous", "default", ("*",))


class TokensFileError(HeadwaterError, ValueError):
    """The tokens file cannot be used; the message names the entry and the problem."""


def hash_token(token: str) -> str:
    """Return the hex SHA-256 of a bearer token, as stored in the tokens file."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(text: str) -> dict[str, Gateway]:
    """Parse the tokens file into gateways by id; raise TokensFileError when malformed."""
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("gateways", []), list):
        raise TokensFileError("expected a mapping with a 'gateways' list")
    gateways: dict[str, Gateway] = {}
    for i, entry in enumerate(doc.get("gateways", [])):
        if not isinstance(entry, dict) or not entry.get("id") or not entry.get("tenant"):
            raise TokensFileError(f"gateways[{i}]: 'id' and 'tenant' are required")
        digest = str(entry.get("token_sha256", "")).lower()
        if digest and not _HEX64.match(digest):
            raise TokensFileError(f"gateways[{i}]: token_sha256 must be 64 hex digits")
        devices = entry.get("devices", [])
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            raise TokensFileError(f"gateways[{i}]: 'devices' must be a list of patterns")
        gw = Gateway(
            gateway_id=str(entry["id"]),
            tenant=str(entry["tenant"]),
            device_patterns=tuple(devices),
            token_sha256=digest,
            revoked=bool(entry.get("revoked", False)),
            rate_bytes_per_second=_limit(entry, i, "rate_bytes_per_second"),
            max_inflight_bytes=_limit(entry, i, "max_inflight_bytes"),
            max_concurrent_rpcs=_limit(entry, i, "max_concurrent_rpcs"),
            max_streams=_limit(entry, i, "max_streams"),
        )
        if gw.gateway_id in gateways:
            raise TokensFileError(f"gateways[{i}]: duplicate id {gw.gateway_id!r}")
        gateways[gw.gateway_id] = gw
    return gateways


def _limit(entry: dict[str, object], index: int, key: str) -> int | None:
    """Return an optional per-gateway limit of a tokens-file entry: a whole number >= 0."""
    value = entry.get(key)
    if value is None:
        return None
    # bool is an int in Python; "true" is no limit anyone meant to write.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TokensFileError(f"gateways[{index}]: {key!r} must be a whole number >= 0")
    return value


class TokenStore:
    """The gateways of the tokens file, re-read when the file changes."""

    def __init__(self, path: str, check_interval_s: float = 1.0) -> None:
        self._path = path
        self._interval = check_interval_s
        self._by_id: dict[str, Gateway] = {}
        self._by_hash: dict[str, Gateway] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._next_check = 0.0
        #: Bumped by every table installed; callers holding a Gateway compare it.
        self.generation = 0

    def load(self) -> None:
        """Read the file now; raise if it is missing or malformed (used at start-up)."""
        self._install(parse_tokens(self._read()), self._file_stamp())

    def _read(self) -> str:
        # UTF-8 whatever the locale: YAML files are UTF-8, and a byte that is not one
        # raises UnicodeDecodeError here (a ValueError), never later in a call.
        with open(self._path, encoding="utf-8") as f:
            return f.read()

    def _file_stamp(self) -> tuple[int, int, int]:
        st = os.stat(self._path)
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _install(self, gateways: dict[str, Gateway], stamp: tuple[int, int, int]) -> None:
        self._by_id = gateways
        self._by_hash = {g.token_sha256: g for g in gateways.values() if g.token_sha256}
        self._stamp = stamp
        self.generation += 1
        log.info("loaded gateway tokens", extra={"gateways": len(gateways), "path": self._path})

    def refresh(self) -> None:
        """Re-read the file if it changed; keep the old table if the new one is bad.

        Bad means unreadable (OSError), not UTF-8 (UnicodeDecodeError) or malformed; the
        reason is logged at every check until the file is fixed.
        """
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + self._interval
        try:
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return
            self._install(parse_tokens(self._read()), stamp)
        except (OSError, UnicodeDecodeError, TokensFileError, yaml.YAMLError) as exc:
            log.error(
                "cannot reload the gateway tokens file; keeping the previous one. Fix the "
                "file (see docs/deploy.md, 'Gateways')",
                extra={"path": self._path, "error": f"{type(exc).__name__}: {exc}"},
            )

    def by_token(self, token: str) -> Gateway | None:
        """Return the gateway whose token hashes to the stored hash, if any."""
        self.refresh()
        digest = hash_token(token)
        gw = self._by_hash.get(digest)
        # Compare in constant time even though the dict lookup already matched.
        if gw and hmac.compare_digest(gw.token_sha256, digest):
            return gw
        return None

    def by_id(self, gateway_id: str) -> Gateway | None:
        """Return the gateway with this id, if any."""
        self.refresh()
        return self._by_id.get(gateway_id)


class Authenticator:
    """Turn call credentials into a Gateway, or raise UnauthenticatedError."""

    def __init__(
        self, store: TokenStore | None, allow_unauthenticated: bool = False, mtls: bool = False
    ) -> None:
        self._store = store
        self._allow_unauthenticated = allow_unauthenticated
        self._mtls = mtls

    @property
    def mtls(self) -> bool:
        """True when callers are identified by client certificates (their names are read)."""
        return self._mtls

    def generation(self) -> int:
        """Return the tokens table's generation, re-reading the file if it changed.

        Cheap (a clock check, a stat at most once a second): streams call it per frame
        and authenticate again only when it moved.
        """
        if self._store is None:
            return 0
        self._store.refresh()
        return self._store.generation

    def authenticate(
        self, metadata: Sequence[tuple[str, str | bytes]], auth_context: Mapping[str, list[bytes]]
    ) -> Gateway:
        """Return the calling gateway; raise UnauthenticatedError when it cannot be trusted."""
        token = _bearer_token(metadata)
        cert_ids = auth_context.get("x509_common_name", []) if self._mtls else []
        gateway: Gateway | None = None
        if cert_ids:
            gateway_id = cert_ids[0].decode()
            gateway = self._store.by_id(gateway_id) if self._store else None
            if gateway is None:
                raise UnauthenticatedError(
                    f"client certificate for {gateway_id!r} is not in the tokens file",
                    reason="UNKNOWN_GATEWAY",
                )
        if token is not None:
            if self._store is None:
                # Fail closed: a credential this server cannot check is not ignored.
                raise UnauthenticatedError(
                    "this server has no tokens file (HEADWATER_INGEST_TOKENS_FILE) and cannot "
                    "check bearer tokens; send no token, or configure the tokens file",
                    reason="INVALID_TOKEN",
                )
            by_token = self._store.by_token(token)
            if by_token is None:
                raise UnauthenticatedError("bearer token is not valid", reason="INVALID_TOKEN")
            if gateway is not None and gateway.gateway_id != by_token.gateway_id:
                raise UnauthenticatedError(
                    "bearer token and client certificate name different gateways",
                    reason="CREDENTIAL_MISMATCH",
                )
            gateway = by_token
        if gateway is None:
            if self._allow_unauthenticated:
                return ANONYMOUS
            raise UnauthenticatedError(
                "no credentials: send 'authorization: Bearer <token>' metadata or a client "
                "certificate",
                reason="MISSING_CREDENTIALS",
            )
        if gateway.revoked:
            raise UnauthenticatedError(
                f"credentials of gateway {gateway.gateway_id!r} are revoked",
                reason="REVOKED_CREDENTIALS",
            )
        return gateway


def _bearer_token(metadata: Sequence[tuple[str, str | bytes]]) -> str | None:
    for key, value in metadata:
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise UnauthenticatedError(
                    "authorization metadata must be 'Bearer <token>'", reason="INVALID_TOKEN"
                )
            return token.strip()
    return None
