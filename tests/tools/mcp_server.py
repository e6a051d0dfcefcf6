"""A real MCP server for the tests, written with the ``mcp`` SDK's server API.

Run as a script: over stdio (the default) or streamable HTTP (``--http PORT``, with
``--require-header NAME=VALUE`` to refuse requests without that header). Its tickets and
a record of every call live in a JSON file (``--state PATH`` or ``MCP_TEST_STATE``), so a
test can check what ran, with which arguments and how often (and the ``traceparent`` in
the ``_meta`` of ``search_tickets`` and ``create_ticket`` requests), and the ``pid`` to
kill.

Tools: ``search_tickets`` (read-only), ``create_ticket`` (no annotations: a write),
``delete_ticket`` (destructive), ``always_fails`` (an ``isError`` result), ``slowEcho``
(sleeps: timeouts and a server killed mid-call; camelCase on purpose), ``add_extras``
(registers ``count_tickets`` and tells clients the list changed), ``storm`` (tells them
so ``count`` times) and ``9lives`` (a name Bosun cannot use: skipped). ``--many-tools N``
lists N more (``bulk_0`` ...); ``MCP_TEST_REPORT_ENV`` and ``MCP_TEST_STDERR`` in its
environment add ``report_env`` and a secret printed to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import Tool as MCPTool
from mcp_types import ToolAnnotations

server = MCPServer("tickets")
_state_path = Path(os.environ.get("MCP_TEST_STATE", "mcp_state.json"))


def _load() -> dict[str, Any]:
    if _state_path.exists():
        loaded: dict[str, Any] = json.loads(_state_path.read_text())
        return loaded
    return {"tickets": {}, "calls": [], "next_id": 1}


def _save(state: dict[str, Any]) -> None:
    temp = _state_path.with_suffix(".tmp")
    temp.write_text(json.dumps(state))
    temp.replace(_state_path)


def _record(tool: str, args: dict[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    """Record a call, with the ``traceparent`` its request's ``_meta`` carried (SEP-414)
    when ``ctx`` is given and it carried one."""
    call: dict[str, Any] = {"tool": tool, "args": args}
    meta = ctx.request_context.meta if ctx is not None else None
    if meta and "traceparent" in meta:
        call["traceparent"] = meta["traceparent"]
    state = _load()
    state["calls"].append(call)
    _save(state)
    return state


@server.tool(
    description="Search tickets by words in their title.\nMatches are case-insensitive.",
    annotations=ToolAnnotations(read_only_hint=True),
)
def search_tickets(query: str, ctx: Context) -> dict[str, Any]:
    state = _record("search_tickets", {"query": query}, ctx)
    found = [t for t in state["tickets"].values() if query.lower() in t["title"].lower()]
    return {"tickets": found}


@server.tool(description="Open a ticket.")
def create_ticket(ctx: Context, title: str, priority: int = 3) -> dict[str, Any]:
    state = _record("create_ticket", {"title": title, "priority": priority}, ctx)
    ticket = {"id": f"T-{state['next_id']}", "title": title, "priority": priority}
    state["tickets"][ticket["id"]] = ticket
    state["next_id"] += 1
    _save(state)
    return ticket


@server.tool(
    description="Delete a ticket for good.",
    annotations=ToolAnnotations(destructive_hint=True),
)
def delete_ticket(ticket_id: str) -> dict[str, Any]:
    state = _record("delete_ticket", {"ticket_id": ticket_id})
    if state["tickets"].pop(ticket_id, None) is None:
        raise ToolError(f"No ticket {ticket_id}")
    _save(state)
    return {"deleted": ticket_id}


@server.tool(description="Always fails.", annotations=ToolAnnotations(read_only_hint=True))
def always_fails() -> str:
    _record("always_fails", {})
    raise ToolError("the ticket system is in maintenance")


@server.tool(name="slowEcho", annotations=ToolAnnotations(read_only_hint=True))
async def slow_echo(text: str, seconds: float = 5.0) -> str:
    """Echo the text after a pause."""
    _record("slowEcho", {"text": text, "seconds": seconds})
    await asyncio.sleep(seconds)
    return text


@server.tool(name="9lives", description="A name that is not a Bosun name.")
def nine_lives() -> str:
    return "meow"


def count_tickets() -> int:
    """Count the open tickets."""
    return len(_load()["tickets"])


@server.tool(description="Add the extra tools.")
async def add_extras(ctx: Context) -> str:
    _record("add_extras", {})
    if "count_tickets" not in {t.name for t in await server.list_tools()}:
        server.add_tool(count_tickets, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()  # 2026-07-28 clients: their subscriptions/listen stream
    await ctx.session.send_tool_list_changed()  # earlier clients: a notification
    return "added"


@server.tool(description="Tell clients the list changed, many times over.")
async def storm(ctx: Context, count: int = 50) -> str:
    for _ in range(count):
        await ctx.notify_tools_changed()
        await ctx.session.send_tool_list_changed()
    return "sent"


def _report_env() -> dict[str, Any]:
    """The names in this process's environment, and the toolset's canary's value."""
    return {"names": sorted(os.environ), "canary": os.environ.get("MCP_TEST_CANARY")}


def _many_tools(count: int) -> None:
    """List ``count`` more tools (``bulk_0`` ...), built once: a very large server."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    bulk = [
        MCPTool(name=f"bulk_{i}", description=f"Bulk tool {i}.", input_schema=schema)
        for i in range(count)
    ]
    listed = server.list_tools

    async def with_bulk() -> list[MCPTool]:
        return [*await listed(), *bulk]

    server.list_tools = with_bulk  # type: ignore[method-assign]


def _counting_lists() -> None:
    """Record every ``tools/list`` as a call of ``tools/list`` (how often a client relists)."""
    listed = server.list_tools

    async def counted() -> list[MCPTool]:
        _record("tools/list", {})
        return await listed()

    server.list_tools = counted  # type: ignore[method-assign]


def _debugging() -> None:
    """Opt-in behaviours a toolset's env turns on: ``MCP_TEST_REPORT_ENV`` adds the
    ``report_env`` tool, ``MCP_TEST_STDERR`` prints the ``TICKETS_TOKEN`` to stderr."""
    if os.environ.get("MCP_TEST_REPORT_ENV"):
        server.add_tool(
            _report_env, name="report_env", annotations=ToolAnnotations(read_only_hint=True)
        )
    if os.environ.get("MCP_TEST_STDERR"):
        token = os.environ.get("TICKETS_TOKEN")
        print(f"Traceback (most recent call last):\n  KeyError: token={token}", file=sys.stderr)
        sys.stderr.flush()


def _guarded(app: Any, header: str, value: str) -> Any:
    """``app`` refusing (401) any HTTP request without ``header: value``."""
    wanted = (header.lower().encode(), value.encode())

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and wanted not in scope.get("headers", []):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    global _state_path
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP")
    parser.add_argument("--state", default=None, help="the JSON state file")
    parser.add_argument("--require-header", default=None, help="NAME=VALUE")
    parser.add_argument("--many-tools", type=int, default=0, help="list this many more tools")
    args = parser.parse_args()
    if args.state:
        _state_path = Path(args.state)
    _debugging()
    if args.many_tools:
        _many_tools(args.many_tools)
    _counting_lists()
    state = _load()
    state["pid"] = os.getpid()
    _save(state)
    if args.http is None:
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app()
    if args.require_header:
        name, _, value = args.require_header.partition("=")
        app = _guarded(app, name, value)
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    sys.exit(main())
