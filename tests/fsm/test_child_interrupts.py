"""Interrupts inside a fan-out's branches and inside an agent tool's child: the whole run
suspends on the child's question, and the answer lands in that child."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from innerloop import Answer, Child, HarnessParams, ResumeError, agent_tool, tool
from innerloop.events import Event, ToolExecuted, Transition
from innerloop.examples import with_approval
from innerloop.fsm import MachineSpec
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext
from tests.fsm.nested_cli import survey
from tests.fsm.test_child import ANTHROPIC_KEY, CLAUDE, GPT, OPENAI_KEY, _child_finals, _collect


def _moves(events: Sequence[Event]) -> list[tuple[str, str, str | None]]:
    return [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]


def _city(body: dict[str, Any]) -> str:
    """The city a branch was asked about (its first user message, OpenAI's wire form)."""
    first = next(m for m in body["messages"] if m["role"] == "user")
    content = first["content"]
    return content if isinstance(content, str) else content[0]["text"]


deleted: list[str] = []


@tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


def _branches(server: OpenAIServer, asking: set[str]) -> Child[Any]:
    """A ``web`` child on the OpenAI SDK and the approval machine: a branch asked about a
    city of ``asking`` first calls ``delete_file`` (which asks for approval), then
    answers with what its tool said; the others answer at once."""

    def respond(body: dict[str, Any]) -> Any:
        city, last = _city(body), body["messages"][-1]
        if last["role"] == "tool":
            return reply(f"{city}: {last['content']}")
        if city in asking:
            return reply(tool_call("delete_file", {"path": f"{city}.log"}, id=f"k-{city}"))
        return reply(f"{city}: sunny")

    return _approving("web", server, respond)


def _approving(name: str, server: OpenAIServer, respond: Any) -> Child[Any]:
    """A child ``name`` on the OpenAI SDK (``server`` answering by ``respond``) and the
    approval machine, with ``delete_file``."""
    server.respond = respond
    return Child(
        name,
        HarnessParams(model=GPT, tools=[delete_file]),
        machine=with_approval(),
        providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=server.base_url)},
    )


def _survey(child: Child[Any]) -> MachineSpec:
    return survey(child, "nested_survey")


def test_a_fan_out_branch_approval_suspends_the_run_and_resumes_in_that_branch(
    make_harness: Any,
) -> None:
    """The middle of three branches asks for approval: once the others have answered the
    parent suspends (``survey -> suspended [interrupted]``) on that question, its path
    ``web#2``. Resumed with ``True``, only that branch goes on (the call runs, it
    answers): the two that had answered are not asked again, and the answers join in
    order."""
    deleted.clear()
    answer = reply("Lisbon and Faro sunny, Porto cleaned.")
    with AnthropicServer([answer]) as a, OpenAIServer() as o:
        child = _branches(o, asking={"Porto"})
        harness = make_harness(
            HarnessParams(model=CLAUDE),
            [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)],
            machine=_survey(child),
        )
        run = harness.start("Lisbon\nPorto\nFaro")
        first = asyncio.run(_collect(run))
        asked = run.state.interrupt
        assert run.state.exit_reason == "suspended"
        assert asked is not None
        assert (asked.kind, asked.state, asked.path) == ("approval", "survey", "web#2")
        assert asked.tool_use_ids == ("k-Porto",)
        assert _moves(first) == [("idle", "survey", None), ("survey", "suspended", "interrupted")]
        assert _child_finals(first) == {
            "web#1": "model_complete",
            "web#2": "suspended",
            "web#3": "model_complete",
        }
        assert (len(o.requests), deleted) == (3, [])

        resumed = harness.resume(run, answer=True)
        events = asyncio.run(_collect(resumed))
        parent_request = a.requests[0].body["messages"]
        child_requests = len(o.requests)
    assert deleted == ["Porto.log"]
    assert child_requests == 4  # Porto's second call only
    assert _child_finals(events) == {"web#2": "model_complete"}
    assert _moves(events)[0] == ("survey", "assemble", "child_succeeded")
    state = resumed.state
    assert state.exit_reason == "model_complete"
    joined = "[web#1] Lisbon: sunny\n[web#2] Porto: deleted Porto.log\n[web#3] Faro: sunny"
    assert parent_request[0]["content"][-1]["text"] == joined
    assert [c["exit_reason"] for c in state.notes["children"]["web"]] == ["model_complete"] * 3
    assert "children.runs" not in state.notes
    assert_valid_history(state.history)


def test_two_asking_branches_are_asked_one_at_a_time_in_order(make_harness: Any) -> None:
    """Two branches ask: the run suspends on ``web#1``'s question; answered, it suspends
    again on ``web#3``'s (``web#2`` had answered and is not asked again); answered, the
    run goes on. A denial lands in its branch as the call's result."""
    deleted.clear()
    with AnthropicServer([reply("Done.")]) as a, OpenAIServer() as o:
        child = _branches(o, asking={"Lisbon", "Faro"})
        harness = make_harness(
            HarnessParams(model=CLAUDE),
            [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)],
            machine=_survey(child),
        )
        run = harness.start("Lisbon\nPorto\nFaro")
        state = run.run_sync()
        assert state.interrupt is not None
        assert (state.exit_reason, state.interrupt.path) == ("suspended", "web#1")
        second = harness.resume(run, answer=False)
        state = second.run_sync()
        assert state.interrupt is not None
        assert (state.exit_reason, state.interrupt.path) == ("suspended", "web#3")
        assert state.interrupt.tool_use_ids == ("k-Faro",)
        third = harness.resume(second, answer={"k-Faro": True})
        state = third.run_sync()
        requests = len(o.requests)
    assert requests == 5  # three first answers, then Lisbon's and Faro's second
    assert deleted == ["Faro.log"]
    assert state.exit_reason == "model_complete"
    assert [c["output"] for c in state.notes["children"]["web"]] == [
        "Lisbon: [tool error] denied by the user",
        "Porto: sunny",
        "Faro: deleted Faro.log",
    ]


def test_a_fan_out_suspended_in_a_checkpoint_store_resumes_in_a_new_harness(
    make_harness: Any, tmp_path: Path
) -> None:
    """The suspended fan-out is stored in SQLite (its branches in the parent's notes); a
    new harness on the same store resumes it by id: the answer lands in the branch."""
    deleted.clear()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with AnthropicServer([reply("Done.")]) as a, OpenAIServer() as o:
        child = _branches(o, asking={"Porto"})

        def harness() -> Any:
            return make_harness(
                HarnessParams(model=CLAUDE),
                [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)],
                machine=_survey(child),
                checkpointer=url,
            )

        state = harness().start("Lisbon\nPorto", run_id="survey-1").run_sync()
        assert state.exit_reason == "suspended"
        state = harness().resume("survey-1", answer=True).run_sync()
        requests = len(o.requests)
    assert (requests, deleted) == (3, ["Porto.log"])
    assert state.exit_reason == "model_complete"
    assert [c["output"] for c in state.notes["children"]["web"]] == [
        "Lisbon: sunny",
        "Porto: deleted Porto.log",
    ]


# -- an agent tool's child -----------------------------------------------------------------


def _cleaner(server: OpenAIServer) -> Child[Any]:
    """A ``cleaner`` child on the OpenAI SDK and the approval machine: it calls
    ``delete_file`` (approval asked), then answers with the tool's result."""

    def respond(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return reply(f"Cleaner: {last['content']}")
        return reply(tool_call("delete_file", {"path": "build.log"}, id="k1"))

    return _approving("cleaner", server, respond)


def test_an_agent_tools_child_approval_suspends_the_run_and_the_answer_lands_in_it(
    make_harness: Any,
) -> None:
    """A parent on the Anthropic SDK calls an agent tool beside a plain tool; the agent's
    child asks for approval: the parent suspends in ``execute`` on that question (path
    ``cleaner[toolu_01]``), with no result for its call yet. Resumed with ``True``, the
    child runs its call and answers, which becomes the tool result; the plain tool, which
    had run, does not run again; the parent's history is valid for both SDKs."""
    deleted.clear()
    clock_calls: list[str] = []

    @tool
    async def clock_time() -> str:
        """The time."""
        clock_calls.append("called")
        return "noon"

    parent_script = [
        reply(
            tool_call("cleaner", {"task": "Remove build.log"}, id="toolu_01"),
            tool_call("clock_time", {}, id="toolu_02"),
        ),
        reply("build.log is gone at noon."),
    ]
    with AnthropicServer(parent_script) as a, OpenAIServer() as o:
        params = HarnessParams(
            model=CLAUDE, tools=[agent_tool(_cleaner(o), "A cleaner agent."), clock_time]
        )
        harness = make_harness(params, [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)])
        run = harness.start("Clean up.")
        first = asyncio.run(_collect(run))
        state = run.state
        asked = state.interrupt
        assert state.exit_reason == "suspended"
        assert asked is not None
        assert (asked.kind, asked.state, asked.path) == ("approval", "execute", "cleaner[toolu_01]")
        assert asked.payload == {
            "calls": [{"id": "k1", "name": "delete_file", "input": {"path": "build.log"}}]
        }
        assert ("execute", "suspended", "interrupted") in _moves(first)
        assert state.pending_tool_uses == ("toolu_01", "toolu_02")
        assert _child_finals(first) == {"cleaner[toolu_01]": "suspended"}

        resumed = harness.resume(run, answer=True)
        events = asyncio.run(_collect(resumed))
        results = a.requests[1].body["messages"][-1]["content"]
        child_requests = len(o.requests)
    assert deleted == ["build.log"]
    assert (child_requests, clock_calls) == (2, ["called"])
    assert _child_finals(events) == {"cleaner[toolu_01]": "model_complete"}
    executed = [(e.name, e.output) for e in events if isinstance(e, ToolExecuted)]
    assert executed == [("cleaner", "Cleaner: deleted build.log"), ("clock_time", "noon")]
    assert [(r["tool_use_id"], r["content"]) for r in results] == [
        ("toolu_01", "Cleaner: deleted build.log"),
        ("toolu_02", "noon"),
    ]
    state = resumed.state
    assert state.exit_reason == "model_complete"
    assert state.history[-1].text == "build.log is gone at noon."
    assert "children.runs" not in state.notes
    assert_valid_history(state.history)


def test_a_question_in_an_agent_tools_child_resumes_from_a_checkpoint_store(
    make_harness: Any, tmp_path: Path
) -> None:
    """The child's own tool asks a question (``ctx.interrupt``): the parent, stored in
    SQLite, suspends on it; a new harness resumes it by id and the answer becomes the
    child's tool result, the child's answer the parent's tool result."""

    @tool
    async def ask_tone(ctx: ToolContext) -> str:
        """Ask which tone to write in."""
        ctx.interrupt("Formal or casual?")

    def respond(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return reply(f"Written, {last['content']}.")
        return reply(tool_call("ask_tone", {}, id="w1"))

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    parent_script = [
        reply(tool_call("writer", {"task": "Write the note"}, id="toolu_09")),
        reply("The note is written."),
    ]
    with AnthropicServer(parent_script) as a, OpenAIServer(respond=respond) as o:
        writer = Child(
            "writer",
            HarnessParams(model=GPT, tools=[ask_tone]),
            providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=o.base_url)},
        )
        params = HarnessParams(model=CLAUDE, tools=[agent_tool(writer, "A writer.")])

        def harness() -> Any:
            provider = AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)
            return make_harness(params, [provider], checkpointer=url)

        state = harness().start("Write a note.", run_id="note-1").run_sync()
        assert state.interrupt is not None
        assert (state.interrupt.kind, state.interrupt.path) == ("question", "writer[toolu_09]")
        question = {"tool_use_id": "w1", "tool": "ask_tone", "question": "Formal or casual?"}
        assert state.interrupt.payload == {"questions": [question]}
        state = harness().resume("note-1", answer="formal").run_sync()
        result = a.requests[1].body["messages"][-1]["content"][0]
    assert state.exit_reason == "model_complete"
    assert (result["tool_use_id"], result["content"]) == ("toolu_09", "Written, formal.")
    assert_valid_history(state.history)


def test_innerloop_runs_resume_lands_the_answer_in_the_suspended_branch(tmp_path: Path) -> None:
    """A fan-out suspended on Porto's approval, stored in SQLite, is resumed by
    ``innerloop runs resume --answer true`` in another process: only Porto goes on (its
    call runs, it answers), Lisbon is not asked again, and the parent answers."""
    from innerloop import Harness
    from tests.checkpoint.test_cli_runs import KEY
    from tests.fsm.nested_cli import MODEL, SPEC
    from tests.test_cli import cli

    def respond(body: dict[str, Any]) -> Any:
        first = body["messages"][0]["content"]
        asked = first if isinstance(first, str) else first[-1]["text"]
        last = body["messages"][-1]["content"]
        if "\n" in asked:  # the parent
            return reply("Lisbon fine, Porto cleaned.")
        if isinstance(last, list) and last[0].get("type") == "tool_result":
            return reply(f"{asked}: {last[0]['content']}")
        if asked == "Porto":
            return reply(tool_call("delete_file", {"path": "porto.log"}, id="k-Porto"))
        return reply(f"{asked}: fine")

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with AnthropicServer(respond=respond) as a:
        provider = AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)
        harness = Harness(HarnessParams(model=MODEL), [provider], machine=SPEC, checkpointer=db)
        state = harness.start("Lisbon\nPorto", run_id="c1").run_sync()
        harness.checkpointer.close()  # type: ignore[union-attr]
        assert state.interrupt is not None
        assert (state.exit_reason, state.interrupt.path) == ("suspended", "web#2")
        done = cli(
            "runs", "resume", "c1", "--db", db, "--answer", "true",
            "--spec", "tests.fsm.nested_cli:SPEC", "--base-url", a.base_url, "--no-live",
            env=KEY,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        asked = [r.body["messages"][0]["content"][0]["text"] for r in a.requests]
        parent_request = a.requests[-1].body["messages"]
    assert sorted(asked[:2]) == ["Lisbon", "Porto"]  # the branches side by side
    assert asked[2:] == ["Porto", "Lisbon\nPorto"]  # resumed: Porto only, then the parent
    assert parent_request[0]["content"][-1]["text"] == (
        "[web#1] Lisbon: fine\n[web#2] Porto: deleted porto.log"
    )


# -- answers are bound to their questions ---------------------------------------------------


def _two_asking(make_harness: Any, a: AnthropicServer, o: OpenAIServer, **kw: Any) -> Any:
    """The survey of Lisbon, Porto and Faro where Lisbon's and Faro's branches ask to delete."""
    return make_harness(
        HarnessParams(model=CLAUDE),
        [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)],
        machine=_survey(_branches(o, asking={"Lisbon", "Faro"})),
        **kw,
    )


def test_a_stale_approval_for_one_branch_never_approves_another(
    make_harness: Any, tmp_path: Path
) -> None:
    """Branches a (Lisbon) and c (Faro) ask; the host refuses a's delete. A stale "approve"
    meant for a's question, given to the first run again, is refused naming both
    interrupts (in memory and with a store), and c's delete never runs; c's own answer,
    given by its id, is taken."""
    for store in (None, f"sqlite:///{tmp_path / 'runs.db'}"):
        deleted.clear()
        with AnthropicServer([reply("Done.")]) as a, OpenAIServer() as o:
            harness = _two_asking(make_harness, a, o, checkpointer=store)
            first = harness.start("Lisbon\nPorto\nFaro")
            state = first.run_sync()
            a_id = first.asked.id
            assert (state.interrupt.path, a_id) == ("web#1", "survey:1")
            second = harness.resume(first, False)
            state = second.run_sync()
            assert state.interrupt is not None
            c_id = state.interrupt.id
            assert (state.interrupt.path, c_id) == ("web#3", "survey:2")
            with pytest.raises(ResumeError) as refused:
                harness.resume(first, True)
            assert (
                "the answer is for interrupt 'survey:1', which it no longer waits on; it "
                "waits on 'survey:2' (approval by web#3: "
            ) in str(refused.value)
            assert "nothing was answered (answer that one with Answer('survey:2', value))" in (
                str(refused.value)
            )
            with pytest.raises(ResumeError, match="'survey:1', which it no longer waits on"):
                harness.resume(first, Answer(a_id, True))
            assert deleted == []
            state = harness.resume(second, Answer(c_id, False)).run_sync()
            assert (state.exit_reason, deleted) == ("model_complete", [])


def test_a_bare_answer_is_refused_while_two_branches_wait(
    make_harness: Any, tmp_path: Path
) -> None:
    """By run id (or by state), a bare answer while a's and c's questions both wait could
    land on either: it is refused, naming both; ``Answer(id, value)`` is taken."""
    deleted.clear()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with AnthropicServer([reply("Done.")]) as a, OpenAIServer() as o:
        harness = _two_asking(make_harness, a, o, checkpointer=url)
        state = harness.start("Lisbon\nPorto\nFaro", run_id="s").run_sync()
        with pytest.raises(ResumeError) as refused:
            harness.resume("s", True)
        assert str(refused.value) == (
            "run 's': it waits on 2 questions (first 'survey:1' (approval by web#1: "
            '{"calls": [{"id": "k-Lisbon", "name": "delete_file", "input": {"path": '
            "\"Lisbon.log\"}}]}); then 'web#3'): a bare answer could land on another than "
            "the one meant; give Answer('survey:1', value)"
        )
        with pytest.raises(ResumeError, match="it waits on 2 questions"):
            harness.resume(state, True)
        state = harness.resume("s", Answer("survey:1", True)).run_sync()
        assert (state.interrupt.path, deleted) == ("web#3", ["Lisbon.log"])
        state = harness.resume("s", True).run_sync()  # one question waits: a bare answer
        assert (state.exit_reason, deleted) == ("model_complete", ["Lisbon.log", "Faro.log"])


def test_a_second_answer_to_one_suspension_is_refused(make_harness: Any, tmp_path: Path) -> None:
    """Resuming a stored suspension claims it: the second resume of it (another harness
    on the same store) is refused, naming the interrupt, and nothing runs twice."""
    deleted.clear()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with AnthropicServer([reply("Done.")]) as a, OpenAIServer() as o:
        one = _two_asking(make_harness, a, o, checkpointer=url)
        one.start("Lisbon\nPorto", run_id="s").run_sync()
        going = one.resume("s", True)
        two = _two_asking(make_harness, a, o, checkpointer=url)
        with pytest.raises(ResumeError) as refused:
            two.resume("s", True)
        going.run_sync()
    assert str(refused.value) == (
        "run 's': its interrupt 'survey:1' was already answered by another resume (in this "
        "process or another); nothing was answered again. harness.checkpoint(run_id) shows "
        "where the run is now; fork it (at=15) to answer that question anew"
    )
    assert deleted == ["Lisbon.log"]
