"""engram-mcp: the MCP server (stdio by default)."""


def main() -> None:
    raise SystemExit("engram-mcp is not built yet")
