"""The token file is read again when it changes: tokens are added and revoked live."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engram_core.errors import Unauthenticated
from engram_gateway.auth import Authenticator, Scope, hash_token


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, content: str) -> None:
    staged = path.with_suffix(".new")
    staged.write_text(content)
    os.replace(staged, path)  # how a Secret or an editor replaces it


def _tokens(path: Path, **tenants: str) -> None:
    entries = [
        {"sha256": hash_token(t), "tenant": n, "scopes": ["read"]} for t, n in tenants.items()
    ]
    _write(path, json.dumps(entries))


def _tenant(auth: Authenticator, token: str) -> str:
    return auth.authorize([("authorization", f"Bearer {token}")], Scope.READ).tenant


def test_an_edited_file_adds_and_revokes_tokens_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _tokens(path, old="acme")
    auth = Authenticator.from_sources("", path, reload_s=0)
    assert _tenant(auth, "old") == "acme"
    _tokens(path, new="acme")
    assert _tenant(auth, "new") == "acme"
    with pytest.raises(Unauthenticated):
        _tenant(auth, "old")


def test_the_file_is_looked_at_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _tokens(path, old="acme")
    clock = Clock()
    auth = Authenticator.from_sources("", path, reload_s=5, clock=clock)
    _tokens(path, new="acme")
    assert _tenant(auth, "old") == "acme"  # not looked at yet
    clock.now += 5
    with pytest.raises(Unauthenticated):
        _tenant(auth, "old")
    assert _tenant(auth, "new") == "acme"


def test_a_broken_edit_keeps_the_tokens_read_before(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _tokens(path, old="acme")
    auth = Authenticator.from_sources("dev=default:read", path, reload_s=0)
    _write(path, "[{")  # half-written
    assert _tenant(auth, "old") == "acme"
    _tokens(path, new="beta")
    assert _tenant(auth, "new") == "beta"
    assert _tenant(auth, "dev") == "default"  # the string tokens are not the file's


def test_an_emptied_file_leaves_no_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _tokens(path, old="acme")
    auth = Authenticator.from_sources("", path, reload_s=0)
    assert auth.configured
    _write(path, "[]")
    assert not auth.configured
    with pytest.raises(Unauthenticated):
        _tenant(auth, "old")
