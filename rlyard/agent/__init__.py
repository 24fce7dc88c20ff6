"""The agent loop's pieces: tool-call parsing (`toolcalls`); the loop, tools and server build on it."""
from rlyard.agent.toolcalls import (
    ParseResult,
    ToolCall,
    format_tool_error,
    normalize_tool,
    parse_tool_calls,
    render_tool_specs,
)

__all__ = ["ParseResult", "ToolCall", "format_tool_error", "normalize_tool", "parse_tool_calls", "render_tool_specs"]
