"""Many hosts without Prometheus: each host's own `vram serve`, its /api/v1/snapshot read directly
(`vram fleet --hosts h1:9787,h2:9787`), into the same Fleet that fleet.py builds from Prometheus,
so the table and `vram fleet pick` are the same either way.

The hosts are read at once (a thread each, at most MAX_PARALLEL), all within one deadline; a host
that does not answer by then is down, said with its reason, and the others are shown.

Every host's answer is untrusted (a hostile or broken server on the network): the body is bounded
in size, the JSON's nesting bounded, and only the shapes the API gives are read: strings
sanitized and bounded (fleet.clean), indexes small integers, every number finite and in range,
else unknown. Credentials (basic auth) are never sent over a redirect, nor over plain HTTP unless
the user asked for an http:// address.

TLS and basic auth come from a client config in the format of a Prometheus scrape config's HTTP
client settings, so an admin copies the `basic_auth` and `tls_config` of the scrape job that reads
the same `vram serve` hosts:

    basic_auth:
      username: alice
      password_file: /etc/vramkit/fleet-password      # or password: ...
    tls_config:
      ca_file: /etc/vramkit/ca.crt                     # relative paths: from the config's directory
      cert_file: client.crt                            # optional client certificate, with key_file
      key_file: client.key
      insecure_skip_verify: false                      # server_name is not supported: refused
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RequestError
from .fleet import (
    MAX_ANSWER,
    MAX_BYTES,
    MAX_COUNT,
    Fleet,
    FleetGpu,
    FleetHost,
    _in_range,
    _judge_host,
    clean,
    names_no_one_else_claims,
)
from .http_get import GetError, get
from .i18n import _, join_words
from .named_files import Refused, read_named

DEFAULT_PORT = 9787  # vram serve's
MAX_HOSTS = 1024  # addresses in one --hosts
MAX_PARALLEL = 32  # hosts read at the same time
MAX_CONFIG = 64 * 1024  # bytes of the client config, a password file
MAX_CERT = 1024 * 1024  # bytes of a certificate or key file
SNAPSHOT = "/api/v1/snapshot"
PARAM = "hosts"
CONFIG_PARAM = "hosts_config"
TOP_KEYS = ("basic_auth", "tls_config")  # of the client config (--hosts-config)
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


def _labels_fit(host: str) -> bool:
    """Each dot-separated name of a host name 1 to 63 characters (DNS's rule; "a..b" names none)."""
    return all(0 < len(label) <= 63 for label in host.removesuffix(".").split("."))
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_INDEX = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the hosts: basic auth and a TLS context (None: the system's defaults)."""

    authorization: str | None = None  # the Authorization header's value
    context: ssl.SSLContext | None = None


def parse_hosts(values: list[str], credentials: bool = False) -> list[str]:
    """Base URLs from --hosts values ('h1:9787,h2', 'https://h3:9787/prefix'), in the order given,
    each once. A RequestError (param 'hosts') names the first one that is not an address, or, with
    `credentials` (basic auth to send), one without a scheme: plain HTTP only where written."""
    urls: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            url = _base_url(item)
            if credentials and "://" not in item:
                shown = clean(item if len(item) <= 80 else item[:77] + "...")
                raise RequestError(_("{quoted}: the basic auth password would go in clear text over plain HTTP; "
                                     "write https://{address} (or http://{address} to send it in clear anyway)").format(
                                         quoted=repr(shown), address=shown),
                                   param=PARAM)
            if url not in urls:
                urls.append(url)
            if len(urls) > MAX_HOSTS:
                raise RequestError(_("more than {n} hosts").format(n=MAX_HOSTS), param=PARAM)
    if not urls:
        raise RequestError(_("expected host addresses, like gpu-a:9787,gpu-b:9787"), param=PARAM)
    return urls


def _base_url(item: str) -> str:
    shown = clean(item if len(item) <= 80 else item[:77] + "...")
    bad = RequestError(_("expected a host address like gpu-a:9787 or https://gpu-a:9787, got {address}").format(
        address=repr(shown)),
                       param=PARAM)
    if not item.isprintable() or any(c.isspace() for c in item):  # urlsplit drops a tab or newline:
        raise bad  # "gpu-a:1980\n1" would read gpu-a:19801
    try:
        parts = urllib.parse.urlsplit(item if "://" in item else f"http://{item}")
    except ValueError:  # an unbalanced '[' (an IPv6 address cut short)
        raise bad from None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port < 65536:
        raise RequestError(_("bad port in {address}").format(address=repr(shown)), param=PARAM) from None
    host = parts.hostname or ""
    # No user:password@ in the address (credentials belong in --hosts-config, not in ps' listing).
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment or "@" in parts.netloc \
            or not ((_HOST.fullmatch(host) and _labels_fit(host)) or (":" in host and _IPV6.fullmatch(host))):
        raise bad
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{netloc}:{port or DEFAULT_PORT}{parts.path.rstrip('/')}"


# ---------------------------------------------------------------- the client config

def _config_error(path: Path, key: str | None, why: str) -> RequestError:
    where = f"{path}: {key}" if key else str(path)
    return RequestError(_("{where}: {why}").format(where=where, why=why), param=CONFIG_PARAM)


def _read(path: Path, config: Path, key: str | None, limit: int, secret: bool = False) -> bytes:
    """A file the config names (or the config itself, which as root must be root's), as named_files
    reads one."""
    try:
        return read_named(path, limit, secret, trusted=path == config)
    except Refused as e:
        raise _config_error(config, key, e.message) from None


def _string(section: dict[Any, Any], key: str, path: Path, prefix: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise _config_error(path, prefix + key, _("expected a non-empty string"))
    return value


def _section(data: dict[Any, Any], key: str, allowed: tuple[str, ...], path: Path) -> dict[Any, Any]:
    section = data.get(key) or {}
    if not isinstance(section, dict):
        raise _config_error(path, key, _("expected a mapping"))
    for name in section:
        if name not in allowed:
            raise _config_error(path, f"{key}.{clean(name)}", _("not supported (supported: {names})").format(
                names=join_words(allowed)))
    return section


def load_client_config(path: Path) -> ClientConfig:
    """The client config at `path`, checked (files readable, the certificates load): one line
    naming the file and the key otherwise (RequestError, exit 2). Anything unknown is refused:
    a security setting that is not applied must not look applied."""
    try:
        import yaml
    except ImportError:
        from .install_hint import install_hint

        raise RequestError(_("needs pyyaml: {hint}").format(
            hint=install_hint("serve")), param=CONFIG_PARAM) from None
    try:
        data = yaml.safe_load(_read(path, path, None, MAX_CONFIG).decode("utf-8"))
    except UnicodeDecodeError:
        raise _config_error(path, None, _("not UTF-8 text")) from None
    except RecursionError:  # collections nested thousands deep: pyyaml's composer recurses
        raise _config_error(path, None, _("values nested too deeply")) from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None)  # pyyaml's, in English
        raise _config_error(path, None, clean(problem) if problem else _("not valid YAML")) from None
    data = data or {}
    if not isinstance(data, dict):
        raise _config_error(path, None, _("expected a mapping of {keys}").format(keys=join_words(TOP_KEYS)))
    for name in data:
        if name not in TOP_KEYS:
            raise _config_error(path, clean(name), _("not supported (supported: {names})").format(
                names=join_words(TOP_KEYS)))
    base = path.parent
    auth = _section(data, "basic_auth", ("username", "password", "password_file"), path)
    authorization = None
    if auth:
        user = _string(auth, "username", path, "basic_auth.")
        password = _string(auth, "password", path, "basic_auth.")
        password_file = _string(auth, "password_file", path, "basic_auth.")
        if user is None or (password is None) == (password_file is None):
            raise _config_error(path, "basic_auth", _("needs a username and one of password, password_file"))
        if password_file is not None:
            raw = _read(base / password_file, path, "basic_auth.password_file", MAX_CONFIG, secret=True)
            password = raw.decode("utf-8", "replace").rstrip("\r\n")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    tls = _section(data, "tls_config", ("ca_file", "cert_file", "key_file", "insecure_skip_verify"), path)
    return ClientConfig(authorization, _tls_context(tls, path, base) if tls else None)


def _tls_context(tls: dict[Any, Any], path: Path, base: Path) -> ssl.SSLContext:
    ca = _string(tls, "ca_file", path, "tls_config.")
    pem = None if ca is None else _read(base / ca, path, "tls_config.ca_file", MAX_CERT).decode("ascii", "replace")
    if pem is not None and not pem.strip():  # (empty cadata would mean the system's CAs)
        raise _config_error(path, "tls_config.ca_file", _("not a certificate: the file is empty"))
    try:
        # ca_file is the only CA trusted, as in Prometheus: the system's would let any public CA's
        # certificate for the name (or IP address) stand in for a host.
        context = ssl.create_default_context(cadata=pem)
    except ssl.SSLError as e:
        raise _config_error(path, "tls_config.ca_file", _("not a certificate: {error}").format(
            error=clean(e.reason or e))) from None
    cert, key = _string(tls, "cert_file", path, "tls_config."), _string(tls, "key_file", path, "tls_config.")
    if (cert is None) != (key is None):
        raise _config_error(path, "tls_config", _("cert_file and key_file go together"))
    if cert is not None and key is not None:
        for name, value in (("cert_file", cert), ("key_file", key)):  # checked before ssl opens them
            _read(base / value, path, f"tls_config.{name}", MAX_CERT, secret=name == "key_file")
        try:
            context.load_cert_chain(base / cert, base / key)
        except (ssl.SSLError, OSError) as e:
            raise _config_error(path, "tls_config.cert_file", _("does not load: {error}").format(
                error=clean(e.strerror or str(e)))) from None
    skip = tls.get("insecure_skip_verify", False)
    if not isinstance(skip, bool):
        raise _config_error(path, "tls_config.insecure_skip_verify", _("expected true or false"))
    if skip:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# ---------------------------------------------------------------- reading the hosts

def read_hosts(urls: list[str], timeout: float, config: ClientConfig | None = None,
               max_answer: int = MAX_ANSWER) -> Fleet:
    """Every host's snapshot, read at once within `timeout` seconds for all of them together."""
    config = config or ClientConfig()
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(urls)))) as pool:
        hosts = list(pool.map(lambda url: _read_host(url, deadline, timeout, config, max_answer), urls))
    names_no_one_else_claims(hosts)
    return Fleet(None, hosts, [], source="hosts")


# One answer parsed at a time, and made into its host's few numbers at once: a hostile host's
# 32 MiB of {} is ~1 GB of objects while parsed, and 32 of them at once would be 30 GB.
_PARSING = threading.Lock()


def _read_host(url: str, deadline: float, timeout: float, config: ClientConfig, max_answer: int) -> FleetHost:
    instance = url.split("://", 1)[1]
    host = FleetHost(host=instance, instance=instance, job="", up=False)
    answer: object | Down = fetch_snapshot(url, deadline, config, max_answer)
    if not isinstance(answer, Down):
        with _PARSING:  # (a parse waited for past the deadline is not started: the host is slow)
            answer = Down("slow") if time.monotonic() > deadline else parse_snapshot(answer)  # type: ignore[arg-type]
            if not isinstance(answer, Down):
                host.up = True
                _fill(host, answer)
                return host
    host.notes.append(answer.note(timeout, max_answer))
    return host


@dataclass(frozen=True)
class Down:
    """Why a host's snapshot was not read: `kind` (slow, too-big, unreachable, protocol, bad-body,
    status, not-json: what a program may match) and `detail` (sanitized: the error, or the HTTP status)."""

    kind: str
    detail: str = ""

    def note(self, timeout: float, max_answer: int) -> str:
        """The sentence `vram fleet` shows for it, in the user's language."""
        if self.kind == "slow":
            return _("down: did not answer within {timeout}").format(timeout=f"{timeout:g}s")
        if self.kind == "too-big":
            return _("down: answered more than {size}: not read").format(size=f"{max_answer // 1024**2}MiB")
        if self.kind == "unreachable":
            return _("down: cannot reach it: {error}").format(error=self.detail)
        if self.kind == "status":
            status, _sep, reason = self.detail.partition(" ")
            if status in ("401", "403"):
                return _("down: answered HTTP {status} {reason} (basic auth: see --hosts-config)").format(
                    status=status, reason=reason)
            return _("down: answered HTTP {status} {reason}").format(status=status, reason=reason)
        if self.kind == "bad-body":
            # Translators: {error} is in English, e.g. "its gzip is broken: Error -3 while decompressing data"
            return _("down: it answered, but its answer cannot be read: {error}").format(error=self.detail)
        if self.kind == "not-json":
            return _("down: answered something that is not vram serve's JSON (is this its address?)")
        return _("down: did not answer in HTTP: {error}").format(error=self.detail)


def fetch_snapshot(url: str, deadline: float, config: ClientConfig, max_answer: int) -> bytes | Down:
    """A host's /api/v1/snapshot body (at most `max_answer` bytes, by `deadline`), or why not."""
    headers = {"Accept": "application/json"}
    if config.authorization is not None:
        headers["Authorization"] = config.authorization
    try:
        answer = get(url + SNAPSHOT, deadline, max_answer, headers=headers, context=config.context,
                     redirects=False)
    except GetError as e:
        kind = e.kind if e.kind in ("slow", "too-big", "unreachable", "bad-body") else "protocol"
        return Down(kind, clean(e.detail))
    if answer.status != 200:
        return Down("status", f"{clean(answer.status)} {clean(answer.reason)}")
    return answer.body


def parse_snapshot(body: bytes) -> object | Down:
    """The body as JSON (untrusted: any shape), or Down('not-json')."""
    try:
        doc: object = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return Down("not-json")
    return doc


def _number(value: object, high: float) -> int | None:
    """A JSON integer (or float) in 0..high, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = _in_range(float(value), high) if abs(value) < 2**63 else None
    return None if number is None else int(number)


def _text(value: object) -> str | None:
    return clean(value) or None if isinstance(value, str) else None


def _fill(host: FleetHost, doc: object) -> None:
    """The snapshot's GPUs into `host`; what is not the API's shape is a note, not a guess."""
    if not isinstance(doc, dict):
        host.notes.append(_("partial: its answer is not a snapshot"))
        return
    if not isinstance(doc.get("gpus"), list):
        error = _text(doc.get("error"))
        host.notes.append(_("partial: {error}").format(
            error=error) if error else _("partial: its answer lists no GPUs"))
        return
    host.host = _text(doc.get("hostname")) or host.host
    host.info = {k: v for k, v in (("driver_version", _text(doc.get("driver_version"))),
                                   ("cuda_version", _text(doc.get("cuda_version")))) if v}
    if doc.get("simulated") is True:
        host.info["simulated"] = "true"
    gpus: dict[int, FleetGpu] = {}
    for item in doc["gpus"][:MAX_COUNT]:
        gpu = _gpu(item)
        if gpu is not None and gpu.index not in gpus:
            gpus[gpu.index] = gpu
    host.gpus = [gpus[i] for i in sorted(gpus)]
    _judge_host(host, None, None)


def _gpu(item: object) -> FleetGpu | None:
    if not isinstance(item, dict):
        return None
    index = item.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not _INDEX.fullmatch(str(index)):
        return None
    gpu = FleetGpu(index, uuid=_text(item.get("uuid")), name=_text(item.get("name")),
                   pci_bus_id=_text(item.get("pci_bus_id")), lost=item.get("lost") is True,
                   vendor="amd" if item.get("vendor") == "amd" else "nvidia")  # (a vram serve before AMD: none)
    gpu.memory_used = _number(item.get("memory_used"), MAX_BYTES)
    gpu.memory_total = _number(item.get("memory_total"), MAX_BYTES)
    gpu.memory_reserved = _number(item.get("memory_reserved"), MAX_BYTES)
    gpu.memory_free = _number(item.get("memory_free"), MAX_BYTES)
    gpu.utilization = _number(item.get("utilization"), 100)
    processes = item.get("processes")
    if isinstance(processes, list):
        gpu.processes = len(processes)
        for p in processes:
            memory = _number(p.get("memory"), MAX_BYTES) if isinstance(p, dict) else None
            if memory is None:
                continue
            user = _text(p.get("user")) or "unknown user"
            gpu.users[user] = gpu.users.get(user, 0) + memory
    if gpu.users:
        gpu.top_user, gpu.top_user_memory = max(gpu.users.items(), key=lambda kv: (kv[1], kv[0]))
    return gpu
