"""A 50-case eval over the loopback servers: the real anthropic and openai SDK clients
talk HTTP to ``AnthropicServer`` and ``OpenAIServer``, which answer each request by the
case it belongs to (``respond=``), so the cases run concurrently in any order.

The cases come in ten kinds (case ``i`` is kind ``i % 10``):

====  =====================================================  ===========================
kind  the model                                              recovery / result
====  =====================================================  ===========================
0     answers at once                                        passes
1     calls the ``add`` tool, then answers                   passes
2     is rate limited (429) once, then answers               backs off; passes
3     fails with a 503 once, then answers                    retried; passes
4     answers JSON                                           schema check; passes
5     is rate limited until the run falls back to OpenAI     backs off, falls back; passes
6     is cut at max_tokens after a tool call, then goes on   compacts; passes
7     answers at once (checked by a judge)                   passes
8     answers wrong                                          fails
9     answers at once; its predicate raises                  error
====  =====================================================  ===========================

``tests/evals/test_loopback_eval.py`` runs it; ``python bench/evals.py`` prints its report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from innerloop import Harness, HarnessParams, RecoveryPolicy, tool
from innerloop.evals import (
    Case,
    CheckContext,
    Contains,
    Dataset,
    EvalReport,
    Judge,
    MatchesSchema,
    Predicate,
    run_eval_sync,
)
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.recovery import RateLimitGates
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    Fault,
    OpenAIServer,
    RateLimit,
    reply,
    tool_call,
)
from innerloop.testing._scripted import ScriptStep

__all__ = ["KINDS", "loopback_dataset", "loopback_eval", "loopback_harness"]

KINDS = 10
_CASE = re.compile(r"case (\d+):")


@tool(category="code")
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def _never(ctx: CheckContext) -> bool:
    raise RuntimeError(f"no verdict for {ctx.case_name}")


def loopback_dataset(cases: int = 50) -> Dataset:
    """The cases: ``case i: what is i + (i+1)?``, each checked for the right sum."""
    out = []
    for i in range(cases):
        kind, answer = i % KINDS, str(2 * i + 1)
        checks: list[Any] = [Contains(answer)]
        if kind == 4:
            checks = [
                MatchesSchema(
                    {
                        "type": "object",
                        "required": ["sum"],
                        "properties": {"sum": {"const": 2 * i + 1}},
                    }
                )
            ]
        elif kind == 7:
            checks.append(Judge("The answer states the right sum."))
        elif kind == 9:
            checks.append(Predicate(_never))
        out.append(Case(f"case {i:02d}", f"case {i}: what is {i} + {i + 1}?", answer, checks))
    return Dataset(out, name=f"loopback x{cases}")


class _Model:
    """Answers each request by its case and turn; counts a case's attempts per turn."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.attempts: dict[tuple[int, int], int] = {}

    def __call__(self, body: Any) -> ScriptStep | None:
        messages = body["messages"]
        text = json.dumps(messages)
        if "<rubric>" in text:  # a judge's question
            return reply('{"passed": true, "reason": "the sum is right"}')
        found = _CASE.search(text)
        assert found is not None, text
        i = int(found.group(1))
        kind, turn = i % KINDS, sum(m["role"] == "assistant" for m in messages)
        key = (i, turn)
        attempt = self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.answer(i, kind, turn, attempt)

    def answer(self, i: int, kind: int, turn: int, attempt: int) -> ScriptStep:
        answer = f"The sum is {2 * i + 1}."
        if self.dialect == "openai":
            return reply(answer)
        if kind == 1 or (kind == 6 and turn == 0):
            if turn == 0:
                return reply(tool_call("add", {"a": i, "b": i + 1}, id=f"t{i}"))
        if kind == 2 and attempt == 1:
            return RateLimit()
        if kind == 3 and attempt == 1:
            return Fault.server_error(503)
        if kind == 4:
            return reply(json.dumps({"sum": 2 * i + 1}))
        if kind == 5:
            return RateLimit()
        if kind == 6 and turn == 1:
            return reply("The sum is", stop_reason="max_tokens")
        if kind == 8:
            return reply("I do not know.")
        return reply(answer)


@contextmanager
def loopback_harness() -> Iterator[Harness[Any]]:
    """A harness whose providers are the real SDK clients on two loopback servers (a fake
    clock, so backoff costs nothing; gates of its own)."""
    with (
        AnthropicServer(respond=_Model("anthropic")) as a,
        OpenAIServer(respond=_Model("openai")) as o,
    ):
        params = HarnessParams(
            model="anthropic:claude-sonnet-4-5-20250929",
            fallbacks=("openai:gpt-4o-mini-2024-07-18",),
            tools=[add],
            recovery=RecoveryPolicy(max_rate_limit_retries=1),
        )
        providers = [
            AnthropicProvider("sk-ant-test", base_url=a.base_url),
            OpenAIProvider("sk-test", base_url=o.base_url),
        ]
        yield Harness(params, providers, clock=FakeClock(), gates=RateLimitGates())


def loopback_eval(cases: int = 50, concurrency: int = 10) -> EvalReport:
    """Run the loopback dataset; the report."""
    with loopback_harness() as harness:
        return run_eval_sync(loopback_dataset(cases), harness, concurrency=concurrency)
