"""The nested loops the durable tests run: a parent with a child state and a handoff,
parents whose child asks the host (an approval, a question), a parent whose tool is
an agent (``agent_tool``), fan-outs whose branches ask for approval (one branch, or
two), and parents whose agent tool's child asks (an approval, a question).

Every model is Claude through the real Anthropic SDK client against one loopback server
of the test process (its base URL in ``$INNERLOOP_TEST_LOOPBACK``, read when a worker
imports this module). :func:`answer` is the server's ``respond``: it answers each request
from what it carries alone (whose system prompt, how many tool results), so any worker,
and the run in process, get the same answer to the same history. Tool calls are logged to
``$INNERLOOP_TEST_DIR/tool.log`` (see ``tests/durable/app.py``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

from innerloop import Child, HarnessParams, ToolSpec, agent_tool
from innerloop.durable import LoopApp, LoopDefinition
from innerloop.examples import with_approval
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    StateSpec,
    child_handler,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.providers import AnthropicProvider
from innerloop.testing import Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput
from tests.durable.app import _log, log_dir

MODEL = "anthropic:claude-sonnet-4-5-20250929"
SCHEMA = {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}


async def look(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    """Blocks while the file ``hold-<what>`` exists, so a test can act while it runs."""
    _log("tool.log", f"start {ctx.tool_use_id}")
    while (log_dir() / f"hold-{args['what']}").exists():  # noqa: ASYNC110  a test's file
        await asyncio.sleep(0.05)
    return ToolOutput(f"looked at {args['what']}")


async def ask(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    """Asks the host which one (a question interrupt)."""
    _log("tool.log", f"start {ctx.tool_use_id}")
    ctx.interrupt({"question": f"Which {args['what']}?"})


LOOK = ToolSpec("look", "Look at something.", SCHEMA, look, category="code")
ASK = ToolSpec("ask", "Ask the user about something.", SCHEMA, ask, category="code")


def tool_results(body: Mapping[str, Any]) -> list[str]:
    return [
        str(b.get("content"))
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def system(body: Mapping[str, Any]) -> str:
    value = body.get("system", "")
    return value if isinstance(value, str) else "".join(b["text"] for b in value)


def two_turns(
    tool: str, args: dict[str, str], id: str, first: str, last: str
) -> Callable[[list[str]], Reply]:
    """A call of ``tool`` first, then ``last`` quoting its result (``{}``)."""

    def turn(done: list[str]) -> Reply:
        return reply(last.format(*done)) if done else reply(first, tool_call(tool, args, id=id))

    return turn


ANSWERS: Mapping[str, Callable[[list[str]], Reply]] = {
    "You research.": two_turns(
        "look", {"what": "census"}, "toolu_r1", "first the census", "Lisbon: 545,000 people ({})."
    ),
    "You plan.": two_turns(
        "look", {"what": "map"}, "toolu_p1", "a map too", "Notes: Lisbon, 545,000 people, {}."
    ),
    "You write.": lambda done: reply("Dear reader, Lisbon is home to 545,000 people."),
    "You clean.": two_turns("look", {"what": "bin"}, "toolu_c1", "let me check", "Done: {}."),
    "You ask.": two_turns("ask", {"what": "bin"}, "toolu_c1", "let me ask", "Done: {}."),
    "You oversee.": lambda done: reply("All done."),
    "You forecast.": two_turns("look", {"what": "sky"}, "toolu_f1", "the sky first", "Sunny ({})."),
    "You delegate.": two_turns(
        "forecaster", {"task": "Weather in Lisbon?"}, "toolu_a1", "asking", "Forecast: {}"
    ),
    "You consult.": two_turns("helper", {"task": "Tidy up."}, "toolu_h1", "asking", "So: {}"),
}
CITIES = ("Lisbon", "Porto", "Faro")
"""The fan-out's branches, one per city; Porto's looks first (and asks for approval)."""


def city(body: Mapping[str, Any]) -> str:
    """The city a branch was asked about (its first user message)."""
    content = body["messages"][0]["content"]
    return str(content if isinstance(content, str) else content[0]["text"])


def survey_turn(body: Mapping[str, Any], looking: tuple[str, ...]) -> Reply:
    """A branch's answer: a city of ``looking`` looks first, then says what it saw; the
    others at once."""
    where, done = city(body), tool_results(body)
    if where in looking and not done:
        call = tool_call("look", {"what": where}, id=f"toolu_s{CITIES.index(where) + 1}")
        return reply("a look first", call)
    return reply(f"{where}: {done[0] if done else 'sunny'}.")


SURVEYS = {"You survey.": ("Porto",), "You survey twice.": ("Lisbon", "Faro")}
"""The fan-outs' system prompts, and the cities whose branches look (and ask) first."""


def answer(body: Any) -> Reply:
    """Each agent's answer to a request, by its system prompt and its tool results (a
    fan-out branch's by its city too)."""
    who = system(body)
    if who in SURVEYS:
        return survey_turn(body, SURVEYS[who])
    if who not in ANSWERS:
        raise ValueError(f"no answer scripted for the system prompt {who!r}")
    return ANSWERS[who](tool_results(body))


def child_first(child: Child[Any], state: str = "helper", doc: str = "") -> MachineSpec:
    """The default machine with a state running ``child`` before the first turn."""
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec(state, doc=doc),
        child_handler(child),
        source="idle",
        target="assemble",
        on_failure="failed",
    )


def nested_spec() -> MachineSpec:
    """The default machine with a research child state first and a writer who takes
    the conversation over at the end."""
    research = Child("research", HarnessParams(model=MODEL, system="You research.", tools=[LOOK]))
    writer = Child("writer", HarnessParams(model=MODEL, system="You write."))
    return with_child_state(
        child_first(research, "research", "a research agent gathers the facts first"),
        StateSpec("writer", doc="the writer takes the conversation over"),
        handoff_handler(writer),
        source="check",
        target="model_complete",
        on_failure="failed",
    ).renamed("nested")


def asking_spec(kind: str) -> MachineSpec:
    """A child state whose child asks the host: its approval (``approval``) before its
    call runs, or a question its tool asks (``question``)."""
    if kind == "approval":
        params = HarnessParams(model=MODEL, system="You clean.", tools=[LOOK])
        child = Child("cleaner", params, machine=with_approval())
    else:
        child = Child("asker", HarnessParams(model=MODEL, system="You ask.", tools=[ASK]))
    return child_first(child).renamed(f"nested-{kind}")


def survey_spec(prompt: str = "You survey.") -> MachineSpec:
    """A ``survey`` state first, fanning a child on the approval machine (its system
    prompt ``prompt``, a key of :data:`SURVEYS`) out over :data:`CITIES`."""
    params = HarnessParams(model=MODEL, system=prompt, tools=[LOOK])
    child = Child("web", params, machine=with_approval())
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="one agent per city"),
        fan_out_handler(child, lambda s: CITIES),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("nested-survey")


def helper(kind: str) -> Child[Any]:
    """The agent tool ``helper``'s child, which asks: its approval before its call runs
    (``approval``), or a question its tool asks (``question``)."""
    if kind == "approval":
        params = HarnessParams(model=MODEL, system="You clean.", tools=[LOOK])
        return Child("helper", params, machine=with_approval())
    return Child("helper", HarnessParams(model=MODEL, system="You ask.", tools=[ASK]))


def nested_app(base_url: str) -> LoopApp:
    """The nested loops, their models on the loopback server at ``base_url``."""
    providers = {"anthropic": AnthropicProvider("sk-ant-test", base_url=base_url)}
    plan = HarnessParams(model=MODEL, system="You plan.", tools=[LOOK])
    oversee = HarnessParams(model=MODEL, system="You oversee.")
    forecaster = Child(
        "forecaster", HarnessParams(model=MODEL, system="You forecast.", tools=[LOOK])
    )
    delegate = HarnessParams(
        model=MODEL,
        system="You delegate.",
        tools=[agent_tool(forecaster, "Ask the forecaster about the weather.")],
    )
    return LoopApp(
        {
            "nested": LoopDefinition(plan, providers, machine=nested_spec()),
            "nested-approval": LoopDefinition(oversee, providers, machine=asking_spec("approval")),
            "nested-question": LoopDefinition(oversee, providers, machine=asking_spec("question")),
            "agent-tool": LoopDefinition(delegate, providers),
            "survey": LoopDefinition(oversee, providers, machine=survey_spec()),
            "survey-twice": LoopDefinition(
                oversee, providers, machine=survey_spec("You survey twice.")
            ),
            **{
                f"agent-{kind}": LoopDefinition(
                    HarnessParams(
                        model=MODEL,
                        system="You consult.",
                        tools=[agent_tool(helper(kind), "Ask the helper to do it.")],
                    ),
                    providers,
                )
                for kind in ("approval", "question")
            },
        }
    )


app = nested_app(os.environ.get("INNERLOOP_TEST_LOOPBACK", "http://127.0.0.1:9"))
