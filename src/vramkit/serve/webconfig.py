"""`vram serve --web-config FILE`: TLS and basic auth from a YAML file in the format of
Prometheus' exporter toolkit (docs/web-configuration.md there), so that an admin's existing
file works unchanged where it uses what vram serve supports:

    tls_server_config:
      cert_file: server.crt          # relative paths: from the config file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
      client_ca_file: ca.crt
      min_version: TLS12             # optional: TLS10 .. TLS13 (default TLS12)
      max_version: TLS13
    basic_auth_users:
      alice: $2y$10$...              # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

Anything else (an unknown key, an inline `cert:`, cipher lists) is refused, naming the file and
the key, rather than silently ignored: a security setting that is not applied must not look
applied. pyyaml and bcrypt come with vramkit's `serve` extra and are imported only here.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RequestError
from ..i18n import _, join_words
from ..named_files import Refused, read_named
from ..procs import sanitize

if TYPE_CHECKING:
    import ssl

MAX_FILE = 1024 * 1024  # bytes read of the config, a certificate or a key
PARAM = "web_config"
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
# Go's tls.ClientAuthType names that Python's ssl can honour (the ones that do not verify a
# certificate it is given cannot be, and are insecure anyway).
CLIENT_AUTH = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version")
TOP_KEYS = ("tls_server_config", "basic_auth_users")
BCRYPT = re.compile(r"\$2[aby]?\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")


class WebConfigError(RequestError):
    """A web config vram serve cannot use: one line naming the file and the key, exit 2."""

    def __init__(self, path: Path, key: str | None, why: str):
        where = f"{path}: {key}" if key else str(path)
        # Translators: {where} is a config file, or the file and a key in it ("web.yml:
        # tls_server_config.cert_file", written as it is); {why} is what is wrong there
        super().__init__(_("{where}: {why}").format(where=where, why=why), param=PARAM)


@dataclass(frozen=True)
class TLSSettings:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"


@dataclass(frozen=True)
class WebConfig:
    path: Path
    tls: TLSSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash


def _read(path: Path, what: Path, key: str | None, private: bool = False) -> bytes:
    """A file the web config names (or the config itself), as named_files reads one."""
    try:
        return read_named(path, MAX_FILE, secret=private)
    except Refused as e:
        raise WebConfigError(what, key, e.message) from None


def _shown(value: object, limit: int = 60) -> str:
    """Text from the file, as an error message may quote it: one line, bounded."""
    return sanitize(str(value))[:limit]


def _text(value: Any, path: Path, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WebConfigError(path, key, _("expected a non-empty string, got {type}").format(type=type(value).__name__))
    return value


def _unknown(section: dict[Any, Any], allowed: tuple[str, ...], path: Path, prefix: str) -> None:
    for key in section:
        if key not in allowed:
            raise WebConfigError(path, f"{prefix}{_shown(key)}", _("not supported by vram serve (supported: {keys})")
                                 .format(keys=join_words(allowed)))


def load(path: Path) -> WebConfig:
    """The web config at `path`, checked: files exist and are readable, hashes are bcrypt, the
    certificate and key load. A WebConfigError (one line, exit 2) otherwise."""
    try:
        import bcrypt  # noqa: F401 - checked here, used by BasicAuth
        import yaml
    except ImportError:
        from ..install_hint import install_hint

        raise RequestError(_("needs pyyaml and bcrypt: {hint}").format(hint=install_hint("serve")),
                           param=PARAM) from None
    raw = _read(path, path, None)
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise WebConfigError(path, None, _("not UTF-8 text")) from None
    except RecursionError:  # collections nested thousands deep: pyyaml's composer recurses
        raise WebConfigError(path, None, _("values nested too deeply")) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or (str(e).splitlines() or [_("not valid YAML")])[0]
        # pyyaml's problem is in English
        why = _shown(problem, 120) if mark is None else _("line {line}: {problem}").format(
            line=mark.line + 1, problem=_shown(problem, 120))
        raise WebConfigError(path, None, why) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WebConfigError(path, None, _("expected a mapping of {keys}").format(keys=join_words(TOP_KEYS)))
    _unknown(data, TOP_KEYS, path, "")
    base = path.parent
    tls = _tls(data.get("tls_server_config"), path, base)
    users = _users(data.get("basic_auth_users"), path)
    config = WebConfig(path=path, tls=tls, users=users)
    if tls is not None:
        ssl_context(config)  # the certificate and key load now, not at the first client
    return config


def _tls(section: Any, path: Path, base: Path) -> TLSSettings | None:
    if section is None:
        return None
    if not isinstance(section, dict):
        raise WebConfigError(path, "tls_server_config", _("expected a mapping"))
    _unknown(section, TLS_KEYS, path, "tls_server_config.")

    def file(key: str, private: bool = False) -> Path:
        name = _text(section.get(key), path, f"tls_server_config.{key}")
        found = base / os.path.expanduser(name)
        _read(found, path, f"tls_server_config.{key}", private=private)
        return found
    if "cert_file" not in section or "key_file" not in section:
        missing = "cert_file" if "cert_file" not in section else "key_file"
        raise WebConfigError(path, f"tls_server_config.{missing}",
                             _("required (with TLS, both cert_file and key_file)"))
    settings: dict[str, Any] = {"cert_file": file("cert_file"), "key_file": file("key_file", private=True)}
    for key, allowed in (("client_auth_type", CLIENT_AUTH), ("min_version", TLS_VERSIONS),
                         ("max_version", TLS_VERSIONS)):
        if key in section:
            value = _text(section[key], path, f"tls_server_config.{key}")
            if value not in allowed:
                raise WebConfigError(path, f"tls_server_config.{key}", _("{value} is not one of {allowed}").format(
                    value=repr(_shown(value, 40)), allowed=join_words(allowed)))
            settings[key] = value
    if settings.get("client_auth_type", "NoClientCert") != "NoClientCert":
        if "client_ca_file" not in section:
            raise WebConfigError(path, "tls_server_config.client_ca_file",
                                 _("required with client_auth_type {type}").format(type=settings["client_auth_type"]))
    if "client_ca_file" in section:
        settings["client_ca_file"] = file("client_ca_file")
    found = TLSSettings(**settings)
    if TLS_VERSIONS.index(found.min_version) > TLS_VERSIONS.index(found.max_version):
        raise WebConfigError(path, "tls_server_config.min_version", _("is above max_version"))
    return found


def _users(section: Any, path: Path) -> dict[str, bytes]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise WebConfigError(path, "basic_auth_users", _("expected a mapping of user: bcrypt hash"))
    users: dict[str, bytes] = {}
    for user, hashed in section.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(path, "basic_auth_users", _("{user} is not a user name (text without ':')")
                                 .format(user=repr(_shown(user, 40))))
        key = f"basic_auth_users.{_shown(user, 40)}"
        if not isinstance(hashed, str) or not BCRYPT.fullmatch(hashed):
            raise WebConfigError(path, key, _("not a bcrypt hash ($2y$10$ and 53 characters: "
                                              "htpasswd -nBC 10 \"\" | tr -d ':\\n')"))
        users[user] = hashed.encode()
    return users


def _cost(hashed: bytes) -> int:
    """A bcrypt hash's cost ($2y$COST$...)."""
    return int(hashed.split(b"$")[2])


def ssl_context(config: WebConfig) -> ssl.SSLContext:
    """A server-side SSLContext for config.tls, or a WebConfigError naming what does not load."""
    import ssl

    tls = config.tls
    assert tls is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    version = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
               "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
    try:
        context.minimum_version = version[tls.min_version]
        context.maximum_version = version[tls.max_version]
    except ValueError as e:
        raise WebConfigError(config.path, "tls_server_config.min_version", str(e)) from None
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as e:
        # Translators: {error} is OpenSSL's, in English
        raise WebConfigError(config.path, "tls_server_config.cert_file",
                             _("{cert} and {key} do not load as a certificate and its key: {error}").format(
                                 cert=tls.cert_file, key=tls.key_file, error=e.reason or e)) from None
    except OSError as e:
        raise WebConfigError(config.path, "tls_server_config.cert_file", e.strerror or str(e)) from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as e:
            raise WebConfigError(config.path, "tls_server_config.client_ca_file",
                                 _("{path} does not load as CA certificates: {error}").format(
                                     path=tls.client_ca_file, error=e)) from None
    context.verify_mode = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                           "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}[tls.client_auth_type]
    return context


class BasicAuth:
    """Checks an Authorization header against the config's users.

    bcrypt takes tens to hundreds of milliseconds by design, so:
    - one check runs at a time (however many clients guess, at most one core is spent on it);
    - a password once verified is remembered (one entry per configured user: the cache cannot
      grow past the user list), and so is a refused (user, password) pair (the most recent
      MAX_FAILURES): repeating either costs no bcrypt. Both caches hold HMACs of what the client
      sent, under a key that dies with the process, never the passwords;
    - an unknown user costs a check against the costliest configured hash (its result ignored),
      so that timing does not tell which users exist.
    `quick` answers from the caches alone (None: a slow check is needed); calling the object
    answers in any case, waiting for its turn at bcrypt."""

    MAX_FAILURES = 4096

    def __init__(self, users: dict[str, bytes]):
        import bcrypt

        self._bcrypt = bcrypt
        self.users = dict(users)
        self._key = secrets.token_bytes(32)  # the caches hold HMACs under a key that dies with the process
        self._verified: dict[str, bytes] = {}  # user -> HMAC of the (user, password) verified
        self._failed: OrderedDict[bytes, None] = OrderedDict()  # HMACs of (user, password) refused
        self._lock = threading.Lock()  # the caches
        self._checking = threading.Lock()  # one bcrypt at a time
        self._decoy = max(users.values(), key=_cost) if users else bcrypt.hashpw(b"-", bcrypt.gensalt(4))
        self.bcrypt_checks = 0  # how many slow checks ran (the caches' effect is visible in tests)

    def _digest(self, user: str, password: bytes) -> bytes:
        name = user.encode("utf-8", "surrogatepass")
        return hmac.new(self._key, len(name).to_bytes(4, "big") + name + password, "sha256").digest()

    def _remembered(self, user: str, digest: bytes) -> bool | None:
        with self._lock:
            verified = self._verified.get(user)
            if verified is not None and hmac.compare_digest(verified, digest):
                return True
            if digest in self._failed:
                self._failed.move_to_end(digest)
                return False
        return None

    def quick(self, header: str | None) -> bool | None:
        """The answer without bcrypt: False for a malformed header or a refused (user, password)
        seen recently, True for a verified one; None when only a bcrypt check can tell."""
        credentials = self._credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        return self._remembered(user, self._digest(user, password))

    def __call__(self, header: str | None) -> bool:
        credentials = self._credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        digest = self._digest(user, password)
        known = self._remembered(user, digest)
        if known is not None:
            return known
        with self._checking:
            known = self._remembered(user, digest)  # settled while this one waited its turn
            if known is not None:
                return known
            hashed = self.users.get(user)
            self.bcrypt_checks += 1
            # bcrypt looks at 72 bytes (htpasswd's hashes too); bcrypt 5 refuses longer passwords.
            try:
                ok = self._bcrypt.checkpw(password[:72], hashed if hashed is not None else self._decoy)
            except ValueError:  # a hash this bcrypt cannot read (checked at load; belt and braces)
                ok = False
            ok = ok and hashed is not None  # the decoy is another user's hash: never a way in
            with self._lock:
                if ok:
                    self._verified[user] = digest
                else:
                    self._failed[digest] = None
                    while len(self._failed) > self.MAX_FAILURES:
                        self._failed.popitem(last=False)
            return ok

    @staticmethod
    def _credentials(header: str | None) -> tuple[str, bytes] | None:
        if not header or len(header) > 4096:
            return None
        scheme, _sep, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        user, sep, password = decoded.partition(b":")
        if not sep:
            return None
        try:
            return user.decode("utf-8"), password
        except UnicodeDecodeError:
            return None
