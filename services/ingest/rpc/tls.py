"""Server TLS credentials that follow their files: certificate rotation without a restart.

cert-manager renews a certificate by rewriting the Secret; the kubelet swaps the mounted
files in place. gRPC asks :meth:`RotatingCertificates.fetch` for the configuration before
every new TLS handshake (``grpc.dynamic_ssl_server_credentials``); it answers ``None``
(keep the current one) unless a file changed, so the cost per handshake is three
``stat`` calls. Connections already open keep the session they negotiated, so open
streams are not dropped; only new connections see the new certificate and client CA.

A change that cannot be used (a key that does not match its certificate, a half-written
file, an unreadable CA) is logged and the previous configuration stays in force: the
next handshake tries again, so a rotation completes as soon as the files are consistent.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
from dataclasses import dataclass

import grpc

from headwater.errors import HeadwaterError
from headwater.ingest.settings import IngestSettings

#: The variable that names a TLS file, in errors so an operator knows what to change.
_var = IngestSettings.variable

log = logging.getLogger(__name__)

#: (inode, mtime ns, size) of each file: what changes when a file is replaced or rewritten.
_Signature = tuple[tuple[int, int, int], ...]


class TlsFilesError(HeadwaterError, RuntimeError):
    """The TLS files cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class TlsMaterial:
    """One consistent read of the certificate chain, its key and the client CA."""

    cert: bytes
    key: bytes
    client_ca: bytes | None

    def fingerprint(self) -> str:
        """A short digest of the certificate chain, for logs (never the key)."""
        return hashlib.sha256(self.cert).hexdigest()[:16]


class RotatingCertificates:
    """Reads the TLS files, checks them, and rereads them when they change."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._lock = threading.Lock()
        self._signature: _Signature = ()
        self.material = self._load()
        #: Configurations handed to gRPC after the first (rotations), for logs and tests.
        self.reloads = 0

    @property
    def paths(self) -> tuple[str, ...]:
        """The files watched."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)

    def credentials(self) -> grpc.ServerCredentials:
        """Return server credentials that pick up changed files at the next handshake."""
        return grpc.dynamic_ssl_server_credentials(
            _configuration(self.material),
            self.fetch,
            require_client_authentication=bool(self.client_ca_file),
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """Return a new configuration when the files changed, else None (the fetcher).

        Never raises: gRPC calls it inside the handshake, and a failure there would refuse
        the connection instead of keeping the certificate that still works.
        """
        try:
            with self._lock:
                if self._stat() == self._signature:
                    return None
                previous = self.material
                material = self._load()
                if material == previous:
                    return None  # touched, not changed
                self.material = material
                self.reloads += 1
            log.info(
                "TLS certificates reloaded; new connections use them, open ones keep theirs",
                extra={
                    "cert_file": self.cert_file,
                    "client_ca_file": self.client_ca_file or None,
                    "fingerprint": material.fingerprint(),
                    "previous_fingerprint": previous.fingerprint(),
                },
            )
            return _configuration(material)
        except Exception as exc:
            log.warning(
                "TLS files changed but cannot be used yet; keeping the previous certificate",
                extra={"files": list(self.paths), "error": f"{type(exc).__name__}: {exc}"},
            )
            return None

    def _stat(self) -> _Signature:
        signature = []
        for path in self.paths:
            st = os.stat(path)  # follows the Secret volume's symlinks to the real file
            signature.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(signature)

    def _load(self) -> TlsMaterial:
        """Read the files until two reads agree, check them, and remember their signature."""
        for _ in range(3):
            before = self._stat()
            material = self._read()
            _check(material, self)
            if self._stat() == before:
                self._signature = before
                return material
        raise TlsFilesError(f"{', '.join(self.paths)} kept changing while being read")

    def _read(self) -> TlsMaterial:
        def read(path: str, setting: str) -> bytes:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as exc:
                raise TlsFilesError(f"{setting}={path}: {exc.strerror or exc}") from None

        return TlsMaterial(
            read(self.cert_file, _var("tls_cert_file")),
            read(self.key_file, _var("tls_key_file")),
            read(self.client_ca_file, _var("tls_client_ca_file")) if self.client_ca_file else None,
        )


def _check(material: TlsMaterial, files: RotatingCertificates) -> None:
    """Refuse a key that does not match its certificate, or a CA that is not PEM.

    gRPC would take such a pair and then fail every handshake; the standard library's
    OpenSSL finds the mismatch up front (from the paths: it reads no other way).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(files.cert_file, files.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise TlsFilesError(
            f"{_var('tls_cert_file')}={files.cert_file} and "
            f"{_var('tls_key_file')}={files.key_file} are not a matching PEM "
            f"certificate and key: {exc}"
        ) from None
    if material.client_ca is not None:
        try:
            context.load_verify_locations(cadata=material.client_ca.decode("ascii"))
        except (ssl.SSLError, ValueError) as exc:
            raise TlsFilesError(
                f"{_var('tls_client_ca_file')}={files.client_ca_file} holds no PEM "
                f"certificate: {exc}"
            ) from None


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.key, material.cert)], root_certificates=material.client_ca
    )
