"""The README's host configurations are valid JSON that start engram-mcp without giving the
model a token, and its command lines are ones engram-mcp accepts."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from engram_mcp.__main__ import _parser

README = Path(__file__).parents[2] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_every_host_configuration_parses_and_names_engram_mcp() -> None:
    servers = [json.loads(block)["mcpServers"]["engram"] for block in _blocks("json")]
    assert len(servers) >= 3
    for server in servers:
        started = " ".join([server.get("command", ""), *server.get("args", [])])
        assert "engram-mcp" in started or server["url"].endswith("/mcp")
        assert "token" not in started.lower()  # only ever in env, never an argument


def test_the_documented_command_lines_parse() -> None:
    lines = [ln for block in _blocks("sh") for ln in block.splitlines() if "engram-mcp --" in ln]
    assert lines
    for line in lines:
        words = shlex.split(line)
        args = _parser().parse_args(words[words.index("engram-mcp") + 1 :])
        assert args.http
