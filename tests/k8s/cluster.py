"""A real etcd and a real kube-apiserver on loopback, for the Helm chart's tests.

Both come from ``scripts/build-tools`` (``$LATENCY_BUDGET_TOOLS_DIR/bin``). Everything they
need is made in a temp dir: a static token file (one token, in ``system:masters``), the
service-account key pair (``openssl``), and the API server's serving certificate, which it
makes itself (``--cert-dir``); the client trusts that certificate and nothing else. No
controller runs: objects are checked by the API server (schemas, strict field validation,
admission, Pod Security) and, with ``dryRun=All``, never stored.
"""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..e2e.services import LOOPBACK, ManagedProcess, ServiceError, free_ports, poll

API_STARTUP_TIMEOUT_S = 180.0  # a cold start on a loaded 2-core machine; seconds when idle


@dataclass(frozen=True)
class Response:
    """An API server's answer: status, the ``Warning`` headers, the JSON body."""

    status: int
    warnings: list[str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where the API server keeps one kind: its collection path and whether it is namespaced."""

    group_version: str
    name: str
    namespaced: bool


def _json(raw: bytes) -> dict[str, Any]:
    """A JSON object body; plain text (``/readyz`` answers ``ok``) as ``{"text": ...}``."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"text": raw.decode(errors="replace")}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


@dataclass
class ApiServer:
    """A running kube-apiserver: send requests with its admin token."""

    url: str
    token: str
    ca_file: Path
    _kinds: dict[tuple[str, str], Resource] = field(default_factory=dict)

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Response:
        """``method path`` with the admin token and ``body`` as JSON; any status is returned."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as answer:
                return Response(answer.status, answer.headers.get_all("Warning") or [], _json(answer.read()))
        except urllib.error.HTTPError as error:
            return Response(error.code, error.headers.get_all("Warning") or [], _json(error.read()))

    def resource(self, api_version: str, kind: str) -> Resource:
        """The resource that serves ``kind`` in ``api_version``, from the API server's discovery."""
        key = (api_version, kind)
        if key not in self._kinds:
            prefix = "/api/" if "/" not in api_version else "/apis/"
            found = self.request("GET", prefix + api_version)
            if found.status != 200:
                raise LookupError(f"{api_version} is not served: {found.status} {found.body}")
            for item in found.body["resources"]:
                if "/" not in item["name"]:  # subresources (status, scale) have no kind of their own
                    self._kinds[(api_version, item["kind"])] = Resource(api_version, item["name"], item["namespaced"])
        if key not in self._kinds:
            raise LookupError(f"{api_version} has no kind {kind}")
        return self._kinds[key]

    def dry_run_create(self, obj: Mapping[str, Any], namespace: str) -> Response:
        """POST ``obj`` with server-side dry run and strict field validation: checked fully, stored never."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        prefix = "/api/" if "/" not in resource.group_version else "/apis/"
        scope = f"/namespaces/{namespace}" if resource.namespaced else ""
        path = f"{prefix}{resource.group_version}{scope}/{resource.name}?dryRun=All&fieldValidation=Strict"
        return self.request("POST", path, obj)


class _ApiServerProcess(ManagedProcess):
    """kube-apiserver, healthy once ``/readyz`` answers 200 over its own TLS with the token."""

    api: ApiServer | None = None

    def wait_healthy(self, *, timeout: float = API_STARTUP_TIMEOUT_S) -> None:
        """Poll ``/readyz`` until it answers 200; fail early if the process exits."""
        api = self.api
        assert api is not None

        def ready() -> bool | None:
            if not self.running:
                raise ServiceError(f"{self.name} exited with code {self.returncode}\n{self.log_tail()}")
            if not api.ca_file.exists():  # written once the server made its certificate
                return None
            try:
                return True if api.request("GET", "/readyz").status == 200 else None
            except OSError:  # not listening yet (ssl.SSLError is an OSError too)
                return None

        try:
            poll(ready, timeout=timeout, what=f"{self.name} /readyz", interval=0.25)
        except TimeoutError as error:
            raise ServiceError(f"{error}\n{self.log_tail()}") from None


def _service_account_keys(work: Path) -> tuple[Path, Path]:
    """An RSA key pair for signing service-account tokens, made by the ``openssl`` CLI."""
    private, public = work / "sa.key", work / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(private), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(private), "-pubout", "-out", str(public)], check=True, capture_output=True
    )
    return private, public


@contextmanager
def running_api_server(etcd: Path, kube_apiserver: Path, work: Path) -> Iterator[ApiServer]:
    """Start etcd and kube-apiserver on free loopback ports in ``work``; stop both afterwards."""
    client_port, peer_port, secure_port = free_ports(3)
    etcd_url = f"http://{LOOPBACK}:{client_port}"
    etcd_process = ManagedProcess(
        name="etcd",
        argv=[
            str(etcd),
            "--name=test",
            f"--data-dir={work / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://{LOOPBACK}:{peer_port}",
            f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer_port}",
            f"--initial-cluster=test=http://{LOOPBACK}:{peer_port}",
            "--unsafe-no-fsync",  # a throwaway store: no fsync, a faster start
            "--log-level=warn",
        ],
        env={},
        log_path=work / "etcd.log",
        health_url=f"{etcd_url}/health",
    )
    token = secrets.token_hex(16)
    (work / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n', encoding="utf-8")
    private, public = _service_account_keys(work)
    cert_dir = work / "certs"
    api = ApiServer(url=f"https://{LOOPBACK}:{secure_port}", token=token, ca_file=cert_dir / "apiserver.crt")
    api_process = _ApiServerProcess(
        name="kube-apiserver",
        argv=[
            str(kube_apiserver),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={secure_port}",
            f"--cert-dir={cert_dir}",
            f"--token-auth-file={work / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={public}",
            f"--service-account-signing-key-file={private}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.250.0.0/24",
            # The reconciler would publish the advertise address as the kubernetes
            # Service's endpoint, and refuses a loopback one: no traffic goes there anyway.
            "--endpoint-reconciler-type=none",
        ],
        env={},
        log_path=work / "kube-apiserver.log",
        health_url="",
    )
    api_process.api = api
    started = time.monotonic()
    etcd_process.start()
    try:
        api_process.start(timeout=API_STARTUP_TIMEOUT_S)
        try:
            print(f"etcd and kube-apiserver ready in {time.monotonic() - started:.1f}s")
            yield api
        finally:
            api_process.stop()
    finally:
        etcd_process.stop()
