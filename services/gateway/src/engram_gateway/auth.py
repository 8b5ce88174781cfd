"""Bearer tokens → (tenant, scopes). Tokens are kept only as SHA-256 hashes.

Sources: a JSON file (``[{"sha256": "<hex>", "tenant": "...", "scopes": ["read", ...]}]``)
and a dev string ``"<token>=<tenant>:<scope>+<scope>;..."``. Nothing configured means no
token is valid. The file is read again when it changes (looked at on the request path at
most every ``reload_s``): a token added works and a token removed stops working without a
restart; a file that no longer parses is logged and the tokens read before stay.
``admin`` implies ``read`` and ``write``. The tenant ``*`` (every tenant) makes a
cluster-admin token: only it may call what reaches beyond one tenant (Rebuild,
RebuildStatus), and it acts on another tenant only where a call names one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from engram_core.errors import InvalidArgument, PermissionDenied, Unauthenticated
from engram_platform.jetstream import TENANT_RE
from engram_platform.logs import set_tenant
from engram_platform.reloading import Reloading

ALL_TENANTS = "*"


class Scope(StrEnum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _principal(tenant: str, scopes: Iterable[str], where: str) -> Principal:
    if tenant != ALL_TENANTS and not TENANT_RE.match(tenant):
        raise ValueError(f"{where}: tenant {tenant!r} must match {TENANT_RE.pattern}")
    parsed = set()
    for s in scopes:
        try:
            parsed.add(Scope(s.strip().lower()))
        except ValueError:
            raise ValueError(f"{where}: unknown scope {s!r}; one of read, write, admin") from None
    if not parsed:
        raise ValueError(f"{where}: no scopes")
    return Principal(tenant, frozenset(parsed))


def parse_token_string(spec: str) -> list[tuple[str, Principal]]:
    """``"tok=tenant:read+write;tok2=t2:read"`` → [(sha256 hex, principal), ...]."""
    out = []
    for i, item in enumerate(p.strip() for p in spec.split(";")):
        if not item:
            continue
        token, sep, rest = item.partition("=")
        tenant, sep2, scopes = rest.partition(":")
        where = f"tokens entry {i + 1}"
        if not (sep and sep2 and token.strip()):
            raise ValueError(f"{where}: expected <token>=<tenant>:<scope>+<scope>")
        principal = _principal(tenant.strip(), scopes.split("+"), where)
        out.append((hash_token(token.strip()), principal))
    return out


def parse_token_file(path: Path) -> list[tuple[str, Principal]]:
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of {{sha256, tenant, scopes}}")
    out = []
    for i, item in enumerate(data):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: expected an object")
        digest = str(item.get("sha256", "")).lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{where}: sha256 must be 64 hex digits")
        scopes = item.get("scopes", [])
        if not isinstance(scopes, list):
            raise ValueError(f"{where}: scopes must be a list")
        out.append((digest, _principal(str(item.get("tenant", "")), map(str, scopes), where)))
    return out


def _entries(entries: Sequence[tuple[str, Principal]]) -> list[_Entry]:
    return [_Entry(bytes.fromhex(d), p) for d, p in entries]


class Authenticator:
    def __init__(
        self,
        entries: Sequence[tuple[str, Principal]],
        token_file: Reloading[list[_Entry]] | None = None,
    ) -> None:
        self._fixed = _entries(entries)
        self._file = token_file

    @classmethod
    def from_sources(
        cls,
        token_string: str = "",
        token_file: Path | None = None,
        reload_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> Authenticator:
        """The file, when given, is read here (a broken one stops the start) and again
        when it changes, looked at on the request path at most every ``reload_s``."""
        source = None
        if token_file is not None:
            path = token_file
            source = Reloading([path], lambda: _entries(parse_token_file(path)), reload_s, clock)
        return cls(parse_token_string(token_string), source)

    def _current(self) -> list[_Entry]:
        return self._fixed if self._file is None else [*self._fixed, *self._file.get()]

    @property
    def configured(self) -> bool:
        return bool(self._current())

    def identify(self, token: str) -> Principal | None:
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found = None
        # Every entry is compared, in constant time, so timing says nothing about which matched.
        for entry in self._current():
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found

    def authorize(
        self,
        metadata: Iterable[tuple[str, str | bytes]],
        scope: Scope,
        any_tenant: bool = False,
    ) -> Principal:
        """The caller's principal from its ``authorization`` metadata, holding ``scope``;
        a token for every tenant (``*``) only where ``any_tenant`` (the call names one)."""
        header = ""
        for key, value in metadata:
            if key.lower() == "authorization":
                header = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                break
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer token in the authorization metadata")
        principal = self.identify(token.strip())
        if principal is None:
            raise Unauthenticated("unknown token")
        if not principal.allows(scope):
            raise PermissionDenied(f"the token lacks the {scope.value!r} scope")
        if principal.tenant == ALL_TENANTS and not any_tenant:
            raise PermissionDenied("a token for every tenant ('*') is for AdminService only")
        # The call's own task: the rest of its log lines name the tenant.
        set_tenant(principal.tenant)
        return principal


def target_tenant(principal: Principal, requested: str) -> str:
    """The tenant an AdminService call acts on: the token's own (``requested`` empty or the
    same), or, for a token of every tenant (``*``), the one ``requested`` names."""
    wanted = requested.strip()
    if principal.tenant == ALL_TENANTS:
        if not wanted:
            raise InvalidArgument("tenant", "required with a token for every tenant")
    elif not wanted:
        return principal.tenant
    elif wanted != principal.tenant:
        raise PermissionDenied(f"the token is for tenant {principal.tenant!r}, not {wanted!r}")
    if not TENANT_RE.match(wanted):
        raise InvalidArgument("tenant", f"must match {TENANT_RE.pattern}")
    set_tenant(wanted)  # a cluster-admin call's lines name the tenant it acts on
    return wanted


def require_cluster(principal: Principal, what: str) -> None:
    """``what`` reaches beyond one tenant's own maintenance (it spans tenants, or erases
    one): only a cluster-admin token (tenant ``*``) may."""
    if principal.tenant != ALL_TENANTS:
        raise PermissionDenied(
            f"{what} needs a cluster-admin token (tenant "
            f"{ALL_TENANTS!r}), not a token of tenant {principal.tenant!r}"
        )
