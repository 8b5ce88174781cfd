"""An MCP server over the Engram SDK."""
