"""Tenants: who a bearer key belongs to, what that tenant may use, and the one function that
makes every stored name its own (`scoped`).

`--api-keys-file PATH` is a JSON file `{"tenants": {"<name>": {"keys": [...],
"key_sha256": [...], "requests_per_minute": N, "concurrent_requests": N,
"output_tokens_per_minute": N, "models": [...], "admin": bool, "mcp_servers": [...],
"mcp_urls": [...]}}}`; a limit left out is unlimited. `--api-key KEY` is one
tenant with that key, and no key at all one open tenant: both are the default tenant, whose
scope is "" and whose stored names are unchanged (existing Redis and SQLite data keep
working). Keys are compared as SHA-256 digests in constant time, every key of the table
each time (`TenantTable.find`); they are never logged.

A tenant's scope is its name. `scoped(scope, name)` is the key under which anything a tenant
makes is stored (responses, conversations, items, jobs, reasoning, prompt-cache namespaces):
another tenant's lookup of the same id reaches another key, and misses. Tenant names cannot
contain "/", so `alice/…` is only ever alice's. The default tenant never shares a server
with named ones (the two flags exclude each other), so its names need no prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import attrs

from .errors import SettingsError

DEFAULT_SCOPE = ""
SEPARATOR = "/"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
LIMIT_FIELDS = ("requests_per_minute", "concurrent_requests", "output_tokens_per_minute")
KEY_FIELDS = ("keys", "key_sha256")
# Which models it may use; whether it may load them; which --mcp-config servers and which
# --mcp-urls hosts its requests may reach (a narrowing of the server's own, docs/mcp.md).
ACCESS_FIELDS = ("models", "admin", "mcp_servers", "mcp_urls")
FLAG = "--api-keys-file"


def scoped(scope: str, name: str) -> str:
    """The stored name of `name` (an id, an item id, a cache key) made by the tenant of
    `scope`."""
    return f"{scope}{SEPARATOR}{name}" if scope else name


def unscoped(key: str) -> tuple[str, str]:
    """(scope, name) of a stored name `scoped` made."""
    scope, sep, name = key.partition(SEPARATOR)
    return (scope, name) if sep else (DEFAULT_SCOPE, key)


def belongs_to(key: str, scope: str) -> bool:
    """Whether the stored (or registry, or job board) name `key` is the tenant of `scope`'s:
    what a listing of live or finished responses filters by to show a tenant its own."""
    return unscoped(key)[0] == scope


@attrs.frozen
class Limits:
    """A tenant's limits; None is unlimited, 0 allows nothing."""

    requests_per_minute: int | None = None
    concurrent_requests: int | None = None
    output_tokens_per_minute: int | None = None


@attrs.frozen
class Tenant:
    name: str                     # "" for the default tenant
    limits: Limits = Limits()
    models: tuple[str, ...] | None = None   # the models it may use, by any of their names;
                                            # None: every model
    admin: bool = False           # may load and unload models (POST /v1/models/{id}/...)
    mcp_servers: tuple[str, ...] | None = None   # configured MCP servers it may use (None: all)
    mcp_urls: tuple[str, ...] | None = None      # hosts of per-request MCP URLs (None: all
                                                 # that --mcp-urls allows)

    def may_use(self, names: tuple[str, ...]) -> bool:
        """Whether a model answering to `names` is this tenant's to use (and to see)."""
        return self.models is None or any(n in self.models for n in names)

    @property
    def scope(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """How the access log and /metrics name it."""
        return self.name or "default"


DEFAULT_TENANT = Tenant(DEFAULT_SCOPE)


@attrs.frozen
class Caller:
    """Who one call is for: the tenant the request's key named, handed down every call that
    reads or makes a tenant's things (the turn and conversation services take it first).
    The HTTP layer makes one per request from the table in force, so a reloaded file's
    limits apply to the next request; below it nothing guesses a caller."""

    tenant: Tenant = DEFAULT_TENANT

    @property
    def scope(self) -> str:
        return self.tenant.scope

    @property
    def limits(self) -> Limits:
        return self.tenant.limits

    def key(self, name: str) -> str:
        """The stored name of this caller's `name` (`scoped`)."""
        return scoped(self.scope, name)

    def owns(self, key: str) -> bool:
        """Whether the stored (registry, job board) name `key` is this caller's."""
        return belongs_to(key, self.scope)


DEFAULT_CALLER = Caller()


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@attrs.frozen
class TenantTable:
    """Bearer keys (their digests) and the tenant each belongs to. `open`: no key is asked
    for (no --api-key, no --api-keys-file): every request is the default tenant."""

    entries: tuple[tuple[bytes, Tenant], ...] = ()
    open: bool = True

    @property
    def tenants(self) -> tuple[Tenant, ...]:
        return tuple(dict.fromkeys(t for _, t in self.entries))

    def find(self, authorization: str) -> Tenant | None:
        """The tenant whose key `authorization` (the header: `Bearer KEY`) carries, or None.
        Every digest is compared, whatever matched: the time taken does not depend on
        which key, or how much of one, a caller guessed."""
        if self.open:
            return DEFAULT_TENANT
        scheme, _, key = authorization.partition(" ")
        given = digest(key.strip() if scheme.lower() == "bearer" else "\0")
        found: Tenant | None = None
        for known, tenant in self.entries:
            if hmac.compare_digest(given, known):
                found = tenant
        return found


def single(api_key: str | None) -> TenantTable:
    """The table of `--api-key` (or of an open server, without one)."""
    if api_key is None:
        return TenantTable()
    return TenantTable(((digest(api_key), DEFAULT_TENANT),), open=False)


def _limit(spec: dict[str, Any], field: str, where: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SettingsError(f"{where}.{field} must be a whole number >= 0 (got {value!r})")
    return value


def _strings(spec: dict[str, Any], field: str, where: str) -> list[str]:
    value = spec.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SettingsError(f"{where}.{field} must be a list of non-empty strings")
    return value


def parse(text: str, source: str) -> TenantTable:
    """A tenants file's table; a SettingsError (one line, naming `source` and the field)
    for anything wrong with it. A typo'd field is an error, not a silent "unlimited"."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{FLAG} {source}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tenants"), dict) \
            or not doc["tenants"]:
        raise SettingsError(f"{FLAG} {source}: expected {{\"tenants\": {{\"<name>\": "
                            "{\"keys\": [...]}, ...}}")
    extra = sorted(set(doc) - {"tenants"})
    if extra:
        raise SettingsError(f"{FLAG} {source}: unknown field {extra[0]!r}")
    entries: list[tuple[bytes, Tenant]] = []
    seen: dict[bytes, str] = {}
    for name, spec in doc["tenants"].items():
        where = f"{FLAG} {source}: tenants.{name}"
        if not NAME.fullmatch(name):
            raise SettingsError(f"{where}: a tenant name is 1-64 letters, digits, '_', '.' "
                                "or '-', starting with a letter or digit")
        if not isinstance(spec, dict):
            raise SettingsError(f"{where} must be an object")
        unknown = sorted(set(spec) - {*KEY_FIELDS, *LIMIT_FIELDS, *ACCESS_FIELDS})
        if unknown:
            raise SettingsError(f"{where}: unknown field {unknown[0]!r} (known: "
                                f"{', '.join((*KEY_FIELDS, *LIMIT_FIELDS, *ACCESS_FIELDS))})")
        admin = spec.get("admin", False)
        if not isinstance(admin, bool):
            raise SettingsError(f"{where}.admin must be true or false (got {admin!r})")
        models, mcp_servers, mcp_urls = (
            tuple(_strings(spec, field, where)) if field in spec else None
            for field in ("models", "mcp_servers", "mcp_urls"))
        tenant = Tenant(name, Limits(*(_limit(spec, f, where) for f in LIMIT_FIELDS)),
                        models=models, admin=admin, mcp_servers=mcp_servers,
                        mcp_urls=mcp_urls)
        digests = [digest(k) for k in _strings(spec, "keys", where)]
        for hexed in _strings(spec, "key_sha256", where):
            if not HEX_DIGEST.fullmatch(hexed):
                raise SettingsError(f"{where}.key_sha256: {hexed[:8]}... is not 64 hex "
                                    "digits (a SHA-256)")
            digests.append(bytes.fromhex(hexed))
        for d in digests:
            if d in seen:
                raise SettingsError(f"{where}: a key also belongs to tenant "
                                    f"{seen[d]!r}")
            seen[d] = name
            entries.append((d, tenant))
    return TenantTable(tuple(entries), open=False)


def load(path: str) -> TenantTable:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"{FLAG} {path}: {exc.strerror or exc}") from None
    return parse(text, path)


class Tenants:
    """The table in force, and where it is re-read from (`reload`, on SIGHUP). Read and
    replaced only in the trio thread, a whole table at a time."""

    def __init__(self, table: TenantTable, path: str | None = None) -> None:
        self.table = table
        self.path = path

    @classmethod
    def configured(cls, api_key: str | None, api_keys_file: str | None) -> "Tenants":
        """From the two flags (a SettingsError for a file that cannot be used, or both)."""
        if api_keys_file is not None:
            if api_key is not None:
                raise SettingsError("--api-key and --api-keys-file exclude each other: put "
                                    "the key in the file as a tenant")
            return cls(load(api_keys_file), api_keys_file)
        return cls(single(api_key))

    def reload(self) -> None:
        """Re-reads the file; raises SettingsError (the table in force stays) when the new
        one cannot be used. Without a file, nothing to do."""
        if self.path is not None:
            self.table = load(self.path)
