"""MCP servers the tests start in subprocesses."""
