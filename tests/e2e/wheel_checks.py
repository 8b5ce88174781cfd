"""Run by test_e2e_wheels.py with the clean virtual environment's Python, where only the
installed wheels and their dependencies exist: ``python wheel_checks.py sdk README.md``
runs the README's first example, ``python wheel_checks.py mcp`` drives ``engram-mcp`` over
stdio with the MCP SDK's client. Each prints one JSON line last, for the test to check."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

FACT = "The wheel smoke test's printer lives on the third floor, next to the kitchen"


def origins() -> dict[str, Any]:
    """Where the packages came from: the venv, never the workspace."""
    found = {name: importlib.util.find_spec(name) for name in ("engram_client", "engram_mcp")}
    return {
        "files": {name: str(spec.origin) if spec else "" for name, spec in found.items()},
        "workspace_importable": importlib.util.find_spec("engram_platform") is not None,
    }


def sdk(readme: str) -> dict[str, Any]:
    match = re.search(r"```python\n(.*?)```", Path(readme).read_text(), re.S)
    assert match, "no python example in the README"
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(match.group(1), "README example", "exec"), namespace)
    return {"last_sequence": namespace["engram"].last_sequence}


async def mcp() -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    command = str(Path(sys.executable).with_name("engram-mcp"))
    tag = f"wheel-{uuid.uuid4().hex[:8]}"
    async with Client(StdioServerParameters(command=command, env=dict(os.environ))) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        stored = await client.call_tool("store_memory", {"content": FACT, "tags": [tag]})
        query = {"query": "where is the printer?", "tags": [tag]}
        recalled = await client.call_tool("recall_memory", query)
    results = (recalled.structured_content or {}).get("results", [])
    return {
        "tools": tools,
        "stored": (stored.structured_content or {}).get("id", ""),
        "recalled": [(r["memory"]["id"], r["memory"]["content"]) for r in results],
    }


if __name__ == "__main__":
    out = sdk(sys.argv[2]) if sys.argv[1] == "sdk" else asyncio.run(mcp())
    print(json.dumps(out | origins()))
