"""Python logging: the ``innerloop`` loggers, their levels, structured fields, no secrets."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from innerloop import HarnessParams, ToolSpec
from innerloop._log import LOG, event_logger
from innerloop.testing import FakeClock, Fault, Reply, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"


async def _broken(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError(f"disk on fire, token {KEY}")


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("echoed")


OBJ = {"type": "object"}
TOOLS = (ToolSpec("broken", "Fails.", OBJ, _broken), ToolSpec("echo", "Echo.", OBJ, _echo))


def params(**kw: Any) -> HarnessParams:
    return HarnessParams(model="scripted:m-20250101", system="s", tools=TOOLS, **kw)


def records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


class TestDefaults:
    def test_silent_by_default(self) -> None:
        """The package logger has a NullHandler and no level of its own."""
        assert any(isinstance(h, logging.NullHandler) for h in LOG.handlers)
        assert LOG.level == logging.NOTSET

    def test_disabled_levels_are_not_looked_at(self) -> None:
        """At the default WARNING, only the event types that may warn are watched."""
        assert sorted(t.type for t in event_logger().rules) == [
            "abort",
            "alert",
            "fallback",
            "tool_executed",
        ]


class TestRunLogs:
    def test_transitions_at_debug(
        self, make_harness: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Every transition is one DEBUG record of innerloop.fsm with source/target/guard."""
        caplog.set_level(logging.DEBUG, logger="innerloop")
        make_harness(params(), ScriptedProvider([reply("hi")])).run_sync("go")
        moves = records(caplog, "transition")
        assert [(r.source, r.target, r.guard) for r in moves] == [  # type: ignore[attr-defined]
            ("idle", "assemble", None),
            ("assemble", "normalize", None),
            ("normalize", "call", None),
            ("call", "stream", "call_opened"),
            ("stream", "check", None),
            ("check", "model_complete", "model_finished"),
        ]
        assert {(r.name, r.levelno) for r in moves} == {("innerloop.fsm", logging.DEBUG)}
        assert moves[3].getMessage() == "transition call -> stream [call_opened]"
        finished = records(caplog, "finished")
        assert len(finished) == 1
        assert finished[0].levelno == logging.INFO
        assert finished[0].exit_reason == "model_complete"  # type: ignore[attr-defined]
        assert finished[0].turns == 1  # type: ignore[attr-defined]

    def test_recovery_at_info_and_warning(
        self, make_harness: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Rate limits and backoff are INFO; the fallback to the next model is WARNING."""
        caplog.set_level(logging.INFO, logger="innerloop")
        primary = ScriptedProvider(
            [Fault.rate_limited(retry_after=3)] + [Fault.rate_limited()] * 5, name="scripted"
        )
        backup = ScriptedProvider([reply("ok")], name="backup", dialect="openai")
        harness = make_harness(
            params(fallbacks=["backup:b-20250101"]), {"scripted": primary, "backup": backup}
        )
        assert harness.run_sync("go").exit_reason == "model_complete"
        backoffs = records(caplog, "backoff")
        assert [(r.name, r.levelno) for r in backoffs] == [("innerloop.recovery", logging.INFO)] * 5
        first = backoffs[0]
        assert (first.attempt, first.delay, first.retry_after) == (1, 3.0, 3.0)  # type: ignore[attr-defined]
        assert first.getMessage() == "backoff attempt 1: waiting 3 s, Retry-After 3 s (total 3 s)"
        (fallback,) = records(caplog, "fallback")
        assert fallback.levelno == logging.WARNING
        assert fallback.getMessage() == (
            "fallback from scripted:m-20250101 to backup:b-20250101 (rate_limited)"
        )
        failures = records(caplog, "model_error")
        assert len(failures) == 6
        assert {(r.name, r.levelno, r.category) for r in failures} == {  # type: ignore[attr-defined]
            ("innerloop.providers", logging.INFO, "rate_limited")
        }
        assert not records(caplog, "transition")  # DEBUG is off

    def test_failure_at_error_without_secrets(
        self, make_harness: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A fatal error aborts at ERROR with its category; the key in it never reaches a
        record, neither in the message nor in the extra fields."""
        caplog.set_level(logging.DEBUG, logger="innerloop")
        fault = Fault("fatal", 401, None, f"invalid x-api-key: {KEY}")
        state = make_harness(params(), ScriptedProvider([fault])).run_sync(f"go {KEY}")
        assert state.exit_reason == "failed"
        (abort,) = records(caplog, "abort")
        assert abort.levelno == logging.ERROR
        assert abort.category == "fatal"  # type: ignore[attr-defined]
        (failed,) = records(caplog, "model_error")
        assert failed.levelno == logging.WARNING
        assert failed.status == 401  # type: ignore[attr-defined]
        for record in caplog.records:
            assert KEY not in record.getMessage()
            assert KEY not in repr(vars(record))
        assert "[redacted]" in abort.getMessage()

    def test_tool_failure_at_warning(
        self, make_harness: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A failing tool is a WARNING of innerloop.tools, a good one DEBUG; no secret."""
        caplog.set_level(logging.DEBUG, logger="innerloop.tools")
        script: list[Reply | Fault] = [
            reply("", tool_call("broken", {}), tool_call("echo", {})),
            reply("done"),
        ]
        make_harness(params(), ScriptedProvider(script)).run_sync("go")
        tools = records(caplog, "tool_executed")
        assert [(r.tool_name, r.levelno, r.is_error) for r in tools] == [  # type: ignore[attr-defined]
            ("broken", logging.WARNING, True),
            ("echo", logging.DEBUG, False),
        ]
        assert tools[0].getMessage().startswith("tool broken failed: tool 'broken' raised")
        assert KEY not in tools[0].getMessage()
        assert {r.name for r in caplog.records} == {"innerloop.tools"}

    def test_host_abort_is_a_warning(
        self, make_harness: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An abort the host asked for is a WARNING, not an ERROR."""
        caplog.set_level(logging.INFO, logger="innerloop")
        run = make_harness(params(), ScriptedProvider([reply("hi")])).start("go")
        run.abort("stop now")
        list(run.iter_sync())
        (abort,) = records(caplog, "abort")
        assert (abort.levelno, abort.reason) == (logging.WARNING, "stop now")  # type: ignore[attr-defined]
