"""Interrupts: a run pauses in ``suspended`` for an answer from outside, and goes on.

Two kinds are built in. ``question``: a tool called ``ctx.interrupt(payload)``; the answer
becomes that call's tool result. ``approval``: a state asks whether tool calls may run
(``innerloop.examples.with_approval``); the answer allows or denies them. A custom state
may raise its own kind with ``ctx.interrupt(kind, payload)``; its answer is any JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from innerloop._errors import ResumeError
from innerloop._json import MAX_JSON_DEPTH, json_depth
from innerloop._messages import ToolResultBlock, ToolUseBlock
from innerloop.fsm._context import PhaseContext
from innerloop.fsm._state import Answer, HarnessState, Interrupt
from innerloop.tools._runner import ToolBatch
from innerloop.tools._spec import ToolCallResult

__all__ = [
    "CHILD_RUNS",
    "answer_text",
    "answered_batch",
    "check_answer",
    "deliver_answer",
    "suspend_for_questions",
    "waiting_elsewhere",
    "with_kept",
]


def suspend_for_questions(
    ctx: PhaseContext, calls: Sequence[ToolUseBlock], batch: ToolBatch
) -> bool:
    """Interrupt the run when a call of ``batch`` asked a question; True when it did.
    The finished calls keep their results in the interrupt: they never run again.

    A call whose agent tool's child asked (its ``interrupt`` an :class:`Interrupt`, the
    child's) suspends the run on that question alone, the first such call in call order:
    one question at a time; the calls that asked run again once it is answered."""
    asking = [r for r in batch.results if r.interrupt is not None]
    if not asking or batch.cancelled:
        return False
    done = [
        ToolResultBlock(r.tool_use_id, r.output, r.is_error)
        for r in batch.results
        if r.interrupt is None
    ]
    child = next((r.interrupt for r in asking if isinstance(r.interrupt, Interrupt)), None)
    if child is not None:
        ctx.interrupt(
            child.kind, child.payload, tool_use_ids=child.tool_use_ids, done=done, path=child.path
        )
        return True
    questions = [
        {"tool_use_id": r.tool_use_id, "tool": r.name, "question": r.interrupt} for r in asking
    ]
    ctx.interrupt(
        "question",
        {"questions": questions},
        tool_use_ids=[r.tool_use_id for r in asking],
        done=done,
    )
    return True


def answer_text(answer: Any) -> str:
    """A tool result's text for an answer: a string as it is, other JSON as JSON text."""
    return answer if isinstance(answer, str) else json.dumps(answer)


def answered_batch(calls: Sequence[ToolUseBlock], interrupt: Interrupt) -> ToolBatch:
    """The whole batch after the questions were answered, in call order."""
    done = {b.tool_use_id: b for b in interrupt.done}
    answers = _per_call(interrupt)
    results = []
    for call in calls:
        if call.id in answers:
            results.append(ToolCallResult(call.id, call.name, answer_text(answers[call.id])))
        else:
            results.append(_kept(call, done[call.id]))
    return ToolBatch(tuple(results))


def _kept(call: ToolUseBlock, block: ToolResultBlock) -> ToolCallResult:
    return ToolCallResult(call.id, call.name, block.content, block.is_error)


def with_kept(
    calls: Sequence[ToolUseBlock], kept: Sequence[ToolResultBlock], batch: ToolBatch
) -> ToolBatch:
    """``batch`` (the results of the calls that ran again after an answer) with the results
    ``kept`` from before the run suspended, all in call order."""
    done = {b.tool_use_id: b for b in kept}
    ran = {r.tool_use_id: r for r in batch.results}
    results = tuple(ran[c.id] if c.id in ran else _kept(c, done[c.id]) for c in calls)
    return ToolBatch(results, batch.cancelled)


def _per_call(interrupt: Interrupt) -> Mapping[str, Any]:
    ids = interrupt.tool_use_ids
    if len(ids) == 1 and not _keyed_by(interrupt.answer, ids):
        return {ids[0]: interrupt.answer}
    answer: Mapping[str, Any] = interrupt.answer
    return answer


def _keyed_by(answer: Any, ids: Sequence[str]) -> bool:
    return isinstance(answer, Mapping) and set(answer) == set(ids)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _asked(interrupt: Interrupt) -> str:
    where = f" by {interrupt.path}" if interrupt.path else ""
    return f"{interrupt.id!r} ({interrupt.kind}{where}: {json.dumps(interrupt.payload)[:200]})"


def waiting_elsewhere(notes: Mapping[str, Any], skip: str = "") -> list[str]:
    """The paths of the saved child runs in ``notes`` (and theirs, and so on) that wait
    for an answer too, but ``skip`` (the child asking now)."""
    found = []
    for path, saved in notes.get(CHILD_RUNS, {}).items():
        child = saved.get("state", {})
        if child.get("final_state") == "suspended" and path != skip:
            found.append(path)
        found += [f"{path}/{p}" for p in waiting_elsewhere(child.get("notes", {}))]
    return found


def _check_bound(
    state: HarnessState, interrupt: Interrupt, answer: Any, bound: str | None, run: str | None
) -> None:
    """Refuse an answer meant for another interrupt than the one the run waits on, and a
    bare one (``bound`` None) while more than one question waits."""
    if bound is not None:
        if interrupt.id and bound != interrupt.id:
            raise ResumeError(
                run,
                f"the answer is for interrupt {bound!r}, which it no longer waits on; it "
                f"waits on {_asked(interrupt)}; nothing was answered (answer that one "
                f"with Answer({interrupt.id!r}, value))",
                answer,
            )
        return
    others = waiting_elsewhere(state.notes, interrupt.path.split("/", 1)[0])
    if others:
        raise ResumeError(
            run,
            f"it waits on {len(others) + 1} questions (first {_asked(interrupt)}; then "
            f"{', '.join(map(repr, others))}): a bare answer could land on another than "
            f"the one meant; give Answer({interrupt.id!r}, value)",
            answer,
        )


def check_answer(
    state: HarnessState,
    answer: Any,
    run: str | None = None,
    max_depth: int = MAX_JSON_DEPTH,
    bound: str | None = None,
) -> Interrupt:
    """The suspended run's interrupt with ``answer`` set; :class:`ResumeError` naming the
    problem when the run is not suspended, waits on another interrupt than the one the
    answer is for (an :class:`Answer`'s id, else ``bound``: the one a ``Run`` ended on),
    or the answer does not fit."""
    if isinstance(answer, Answer):
        bound, answer = answer.interrupt_id, answer.value
    interrupt = state.interrupt
    if state.final_state != "suspended" or interrupt is None:
        where = state.final_state or "running (not finished)"
        meant = f"the answer for interrupt {bound!r} comes too late: " if bound else ""
        raise ResumeError(
            run,
            f"{meant}it is not suspended (it is {where}), so it takes no answer; resume it "
            "without one to continue a run that stopped mid-way",
            answer,
        )
    _check_bound(state, interrupt, answer, bound, run)
    if answer is None:
        raise ResumeError(
            run,
            f"it is suspended on a {interrupt.kind!r} interrupt; pass answer=... "
            f"(it asked: {json.dumps(interrupt.payload)[:200]})",
        )
    depth = json_depth(answer)
    if depth > max_depth:
        raise ResumeError(
            run,
            f"the answer is nested {depth} levels deep, deeper than the {max_depth} "
            "levels of lists and dicts an answer may have (HarnessParams.max_json_depth); "
            "give a flatter one",
        )
    if not _is_json(answer):
        raise ResumeError(run, f"the answer must be JSON data, not {type(answer).__name__}", answer)
    ids = interrupt.tool_use_ids
    if interrupt.kind == "approval":
        _check_approval(run, ids, answer)
    elif interrupt.kind == "question" and len(ids) > 1 and not _keyed_by(answer, ids):
        raise ResumeError(
            run,
            f"{len(ids)} tool calls asked; answer with a dict keyed by their ids: "
            + ", ".join(repr(i) for i in ids),
            answer,
        )
    return attrs.evolve(interrupt, answered=True, answer=answer)


def _check_approval(run: str | None, ids: Sequence[str], answer: Any) -> None:
    if isinstance(answer, bool):
        return
    expected = "True (run them all), False (deny them all) or {tool_use_id: bool} for " + (
        ", ".join(repr(i) for i in ids)
    )
    if not isinstance(answer, Mapping):
        raise ResumeError(
            run, f"an approval answer is {expected}, not {type(answer).__name__}", answer
        )
    missing = [i for i in ids if i not in answer]
    unknown = [k for k in answer if k not in ids]
    wrong = [k for k, v in answer.items() if not isinstance(v, bool)]
    if missing or unknown or wrong:
        parts = []
        if missing:
            parts.append("no verdict for " + ", ".join(map(repr, missing)))
        if unknown:
            parts.append("no pending call " + ", ".join(map(repr, unknown)))
        if wrong:
            parts.append("not a bool for " + ", ".join(map(repr, wrong)))
        raise ResumeError(run, "; ".join(parts) + f"; an approval answer is {expected}", answer)


CHILD_RUNS = "children.runs"
"""``state.notes`` key: the saved runs of the children of the state now running, by path
(``{"at": state, "state": its state as JSON}``, and ``"answer"`` once one is given)."""


def deliver_answer(state: HarnessState, answered: Interrupt, run: str | None = None) -> None:
    """Hand the answer to an interrupt a child asked (``answered.path``) to that child's
    saved run in ``state.notes``; it goes on with it when its parent's handler runs it."""
    head = answered.path.split("/", 1)[0]
    entry = state.notes.get(CHILD_RUNS, {}).get(head)
    if entry is None:
        raise ResumeError(
            run,
            f"it was resumed in state {answered.state!r} for its child {head!r}, which "
            f"left no saved run in notes[{CHILD_RUNS!r}]; resume it from the checkpoint "
            "where it suspended",
        )
    entry["answer"] = answered.answer
