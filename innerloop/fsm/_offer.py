"""The tools offered on each turn, and what a switch of provider does to server tools.

Imported by the phases only for a run that needs it. With ``params.prepare_tools`` or
``params.tool_sources`` set, :func:`offer_tools` (run by
``assemble`` before each model call) reads the sources again, lets the hook choose, checks
its choice, and keeps the turn's tools in ``scope.offered`` and their definitions in
``scope.settings``; the tool runner then sees those tools only (:func:`tool_scope`), and
a call to a declared tool that was not offered is answered with :func:`not_offered`.
Without either, nothing here runs: the run offers ``params.tools`` every turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from innerloop._errors import ParamsError
from innerloop._events import Alert
from innerloop._messages import ToolUseBlock
from innerloop.fsm._context import PhaseContext, tool_definition
from innerloop.fsm._params import HarnessParams
from innerloop.providers._servertools import server_tool_definition
from innerloop.recovery._tokens import MessageTokenCache
from innerloop.tools._spec import ToolCallResult, ToolParams, ToolSpec, ToolState

__all__ = [
    "OfferedScope",
    "not_offered",
    "offer_tools",
    "server_tools_alert",
    "tool_scope",
]


async def _declared(params: HarnessParams) -> tuple[ToolSpec, ...]:
    """``params.tools``, then each source's tools as it lists them now."""
    tools = list(params.tools)
    names = {t.name: "params.tools" for t in tools}
    for source in params.tool_sources:
        for spec in await source.tools():
            if spec.name in names:
                raise ParamsError(
                    "tool_sources",
                    f"{source.name!r} offers a tool named {spec.name!r}, which "
                    f"{names[spec.name]} declares too; rename one (an MCPServer takes "
                    "prefix= or names=)",
                    spec.name,
                )
            names[spec.name] = repr(source.name)
            tools.append(spec)
    return tuple(tools)


def _chosen(
    prepare: Callable[..., Iterable[ToolSpec | str]],
    state: Any,
    declared: tuple[ToolSpec, ...],
) -> tuple[ToolSpec, ...]:
    """What ``prepare`` returns, checked: declared tools (specs or names), each once."""
    by_name = {t.name: t for t in declared}
    listed = ", ".join(by_name) or "none"
    fix = "return some of the tools it is given (specs or names), in any order"
    result = prepare(state, declared)
    if isinstance(result, str | ToolSpec) or not isinstance(result, Iterable):
        raise ParamsError(
            "prepare_tools",
            f"must return a list of tools, got {result!r}; {fix}",
            result,
        )
    chosen: list[ToolSpec] = []
    for item in result:
        name = item.name if isinstance(item, ToolSpec) else item
        spec = by_name.get(name) if isinstance(name, str) else None
        if spec is None:
            raise ParamsError(
                "prepare_tools",
                f"returned {item!r}, which is not a declared tool (declared: {listed}); {fix}",
                item,
            )
        if isinstance(item, ToolSpec) and item != spec:
            raise ParamsError(
                "prepare_tools",
                f"returned a changed spec of {name!r}; {fix} (declare a tool to change it)",
                item,
            )
        if spec in chosen:
            raise ParamsError("prepare_tools", f"returned {name!r} twice; {fix}", item)
        chosen.append(spec)
    return tuple(chosen)


async def offer_tools(ctx: PhaseContext) -> bool:
    """Choose this turn's tools (see the module's docstring); True when they are not the
    last turn's (their tokens are then counted again)."""
    params, scope = ctx.params, ctx.scope
    declared = await _declared(params)
    prepare = params.prepare_tools
    offered = declared if prepare is None else _chosen(prepare, ctx.state, declared)
    choice = params.tool_choice
    if choice.startswith("tool:") and choice[5:] not in {t.name for t in offered}:
        raise ParamsError(
            "prepare_tools",
            f"left out {choice[5:]!r}, which tool_choice={choice!r} forces; offer it on "
            "every turn or use tool_choice='auto'",
        )
    if scope.offered == offered:  # the same tools (a source's specs compare by value)
        return False
    scope.offered = offered
    scope.settings = attrs.evolve(scope.settings, tools=tuple(map(tool_definition, offered)))
    if not scope.emits:  # a source's agent tool: ``execute`` forwards its child's events
        scope.emits = any(t.emits_events for t in offered)
    return True


def not_offered(ctx: PhaseContext, call: ToolUseBlock) -> ToolCallResult | None:
    """The error result of a call to a tool this turn did not offer (None: offered)."""
    offered = ctx.scope.offered
    if offered is None or any(t.name == call.name for t in offered):
        return None
    names = ", ".join(t.name for t in offered) or "none"
    return ToolCallResult(
        call.id,
        call.name,
        f"tool {call.name!r} is not offered on this turn, so it was not run; the tools "
        f"offered now: {names}",
        is_error=True,
        error="not_offered",
    )


@attrs.frozen
class _OfferedParams:
    """The run's params as the tool runner reads them, with this turn's tools."""

    params: HarnessParams
    tools: tuple[ToolSpec, ...]

    @property
    def max_parallel_tools(self) -> int:
        return self.params.max_parallel_tools

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def timeout_for(self, tool: ToolSpec) -> float:
        return self.params.timeout_for(tool)

    def __getattr__(self, name: str) -> Any:
        if name == "params":  # not set yet (attrs builds the instance)
            raise AttributeError(name)
        return getattr(self.params, name)  # everything else, as the run's params say


@attrs.frozen
class OfferedScope:
    """A :class:`~innerloop.tools._runner.ToolScope` over this turn's tools; ``phase`` is
    the run's own context (what an agent tool runs its child inside)."""

    params: ToolParams
    state: ToolState
    tokens: MessageTokenCache
    request_abort: Callable[[str], None]
    phase: PhaseContext


def tool_scope(ctx: PhaseContext, offered: tuple[ToolSpec, ...]) -> OfferedScope:
    """What the tool runner is given on a turn that offers ``offered``: a view of ``ctx``
    whose params hold those tools."""
    return OfferedScope(
        _OfferedParams(ctx.params, offered), ctx.state, ctx.tokens, ctx.request_abort, ctx
    )


def server_tools_alert(ctx: PhaseContext) -> Alert | None:
    """After a switch of provider: an alert naming the server-tool blocks of the history
    its API cannot take (left out of its requests; the text around them stays) and the
    server tools it does not run (not offered to it). None when there is nothing to say
    (the fallback phase calls it only for a run with server tools)."""
    dialect = ctx.provider.dialect
    blocks = [b for m in ctx.state.history for b in m.server_tools if b.dialect != dialect]
    tools = [t.name for t in ctx.params.server_tools if server_tool_definition(t, dialect) is None]
    if not blocks and not tools:
        return None
    parts = []
    if blocks:
        kinds = ", ".join(dict.fromkeys(b.kind for b in blocks))
        parts.append(
            f"{len(blocks)} server-tool block(s) of the history ({kinds}) are left out of its "
            "requests (the history keeps them, the text around them stays)"
        )
    if tools:
        parts.append(f"server tools {', '.join(tools)} are not offered to it")
    choice = ctx.choice
    return Alert(
        "server_tools_dropped",
        f"{choice.provider}:{choice.model} ({dialect}) cannot take server tools: "
        + "; ".join(parts),
    )
