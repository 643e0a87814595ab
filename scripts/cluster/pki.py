"""The cluster's credentials, made fresh for each start with ``openssl``.

A CA, the API server's serving certificate, the service-account signing key, and one bearer
token per identity (API server ``--token-auth-file``), written into a kubeconfig each.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

#: Identity -> (user, groups). The built-in RBAC bindings and the Node authorizer know
#: these names; ``admin`` is for the tests, helm and CoreDNS (a one-machine test cluster).
IDENTITIES = {
    "admin": ("headwater-admin", ["system:masters"]),
    "kubelet": ("system:node:{node}", ["system:nodes"]),
    "controller-manager": ("system:kube-controller-manager", []),
    "scheduler": ("system:kube-scheduler", []),
    "kube-proxy": ("system:kube-proxy", []),
}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    """The credentials' folder and what is in it."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA certificate: clients verify the API server with it."""
        return self.folder / "ca.crt"

    @property
    def tokens(self) -> Path:
        """The API server's token file."""
        return self.folder / "tokens.csv"

    def kubeconfig(self, identity: str) -> Path:
        """The kubeconfig of one of IDENTITIES."""
        return self.folder / f"{identity}.kubeconfig"

    def file(self, name: str) -> Path:
        """A file of the folder by name."""
        return self.folder / name

    def create(self, node: str, node_ip: str, service_ip: str, server: str) -> None:
        """Make everything, for a node ``node`` and an API server at ``server``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        f = self.file
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                 "-keyout", str(f("ca.key")), "-out", str(self.ca),
                 "-subj", "/CN=headwater-k8s-ca")  # fmt: skip
        sans = ",".join(
            [f"IP:{ip}" for ip in (node_ip, service_ip, "127.0.0.1")]
            + [f"DNS:{name}" for name in ("kubernetes", "kubernetes.default",
                                          "kubernetes.default.svc",
                                          "kubernetes.default.svc.cluster.local", node)]
        )  # fmt: skip
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(f("apiserver.key")),
                 "-out", str(f("apiserver.csr")), "-subj", "/CN=kube-apiserver")  # fmt: skip
        f("apiserver.ext").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", str(f("apiserver.csr")), "-CA", str(self.ca),
                 "-CAkey", str(f("ca.key")), "-CAcreateserial", "-days", "30",
                 "-extfile", str(f("apiserver.ext")), "-out", str(f("apiserver.crt")))  # fmt: skip
        _openssl("genrsa", "-out", str(f("sa.key")), "2048")
        _openssl("rsa", "-in", str(f("sa.key")), "-pubout", "-out", str(f("sa.pub")))
        rows = []
        for identity, (user, groups) in IDENTITIES.items():
            token = secrets.token_hex(16)
            name = user.format(node=node)
            rows.append(f'{token},{name},{name},"{",".join(groups)}"')
            self.kubeconfig(identity).write_text(self._kubeconfig(server, name, token))
        self.tokens.write_text("\n".join(rows) + "\n")
        for path in self.folder.iterdir():
            path.chmod(0o600)

    def _kubeconfig(self, server: str, user: str, token: str) -> str:
        ca = base64.b64encode(self.ca.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "headwater", "cluster": {"server": server,
                                                  "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "headwater",
                          "context": {"cluster": "headwater", "user": user}}],
            "current-context": "headwater",
        }  # fmt: skip
        return yaml.safe_dump(config)
