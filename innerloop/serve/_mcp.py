"""MCP (the ``mcp`` SDK's server): the agent as one tool, over streamable HTTP at ``/mcp``
or over stdio (``innerloop serve --stdio``).

The tool (named as the served harness) takes ``prompt`` (and optionally
``conversation_id`` and ``conversation_token``, as the OpenAI route takes them) and
answers the run's answer as text; a harness with an ``output_type`` also answers it as
structured content. While the run goes on, each transition is a progress notification
(when the client sent a progress token). A cancelled call aborts the run (its history
stays valid, its store keeps it). An approval (or a tool's question) inside the run is
asked of the client through elicitation when the client declares it; otherwise the call
answers an error result saying so, and the run stays suspended (a conversation can be
answered through the OpenAI route's ``innerloop_resume``).
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel
from starlette.applications import Starlette

from innerloop.events import Transition
from innerloop.fsm import Interrupt, Run
from innerloop.serve._runs import Refused, Served, answer_of, question

__all__ = ["mcp_app", "mcp_server"]


class Approval(BaseModel):
    """What an approval elicitation asks: whether the calls may run."""

    approve: bool


class Answer(BaseModel):
    """What any other interrupt's elicitation asks: the answer, as text."""

    answer: str


async def _elicit(ctx: Context, interrupt: Interrupt) -> Any:
    """The client's answer to ``interrupt`` (declined or cancelled: a denial, or
    None for a question)."""
    if interrupt.kind == "approval":
        approved = await ctx.elicit(question(interrupt), Approval)
        return approved.action == "accept" and approved.data.approve
    answered = await ctx.elicit(question(interrupt), Answer)
    return answered.data.answer if answered.action == "accept" else None


def _can_elicit(ctx: Context) -> bool:
    capabilities = ctx.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def _result(run: Run[Any], fields: dict[str, Any]) -> mcp_types.CallToolResult:
    """The run's answer as text; as structured content its typed output (an object as
    it is, anything else under ``output``), or with a conversation ``{"output": ...,
    "conversation_id": ..., "conversation_token": ...}``."""
    state = run.state
    text = mcp_types.TextContent(type="text", text=answer_of(state))
    structured: dict[str, Any] | None = None
    if fields:
        structured = {"output": state.output_data} | fields
    elif isinstance(state.output_data, dict):
        structured = state.output_data
    elif state.output_data is not None:
        structured = {"output": state.output_data}
    failed = state.exit_reason != "model_complete" and state.output_data is None
    return mcp_types.CallToolResult(content=[text], structured_content=structured, is_error=failed)


def _refusal(interrupt: Interrupt) -> mcp_types.CallToolResult:
    text = (
        f"refused: {question(interrupt)} This MCP client cannot answer (it declares no "
        "elicitation capability), so the run is left suspended, waiting for the answer"
    )
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], is_error=True
    )


def _tool(served: Served) -> Any:
    async def ask(
        prompt: str,
        ctx: Context,
        conversation_id: str | None = None,
        conversation_token: str | None = None,
    ) -> mcp_types.CallToolResult:
        """Ask the agent: its answer when its run ends."""
        fields: dict[str, Any] = {}
        session = None
        try:
            if conversation_id is None:
                run = served.harness.start(prompt)
            else:
                conversation = served.conversation(conversation_id, conversation_token)
                session = conversation.session
                fields = {
                    "conversation_id": conversation_id,
                    "conversation_token": conversation.token,
                }
                run = session.start(prompt)
        except Refused as exc:
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=str(exc))], is_error=True
            )
        steps = 0
        while True:
            with served.read(run, session=session) as reading:
                async for event in reading:
                    if type(event) is Transition:
                        steps += 1
                        await ctx.report_progress(steps, None, event.target)
            interrupt = run.state.interrupt
            if run.state.final_state != "suspended" or interrupt is None:
                return _result(run, fields)
            if not _can_elicit(ctx):
                return _refusal(interrupt)
            answer = await _elicit(ctx, interrupt)
            run = served.harness.resume(run, answer) if session is None else session.resume(answer)

    return ask


def mcp_server(served: Served, name: str) -> MCPServer:
    """The MCP server with the agent as the tool ``name``."""
    server = MCPServer(name, log_level="ERROR")
    params = served.harness.params
    description = f"Ask the agent {name!r}: a prompt in, its answer out."
    if params.system:
        description += f" Its instructions: {str(params.system)[:300]}"
    server.add_tool(_tool(served), name=name, description=description)
    return server


def mcp_app(served: Served, name: str, limit: int) -> Starlette:
    """The streamable HTTP application (at ``/mcp``); its host checks are the served app's."""
    return mcp_server(served, name).streamable_http_app(
        streamable_http_path="/mcp",
        max_request_body_size=limit,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
