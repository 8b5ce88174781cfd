"""An MCP server giving agents Engram's long-term memory as tools."""
