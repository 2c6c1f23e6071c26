"""Command line: ``innerloop run | demo | diagram``.

Exit codes (also in README.md):

====  ==========================================================
0     the model finished (model_complete or tasks_complete)
1     the run failed (an unrecoverable provider error, see the log)
2     bad usage: unknown option, bad value, missing API key
3     a limit was reached (max_turns_exceeded or budget_exceeded)
4     aborted (Ctrl-C / SIGINT, or the host aborted)
====  ==========================================================
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["EXIT_CODES", "main"]

EXIT_CODES = {
    "model_complete": 0,
    "tasks_complete": 0,
    "failed": 1,
    "max_turns_exceeded": 3,
    "budget_exceeded": 3,
    "aborted": 4,
}
USAGE_ERROR = 2
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5-20250929", "openai": "gpt-4o-mini-2024-07-18"}


class UsageError(Exception):
    """A problem with the command line or the environment; printed without a traceback."""


def exit_code(exit_reason: str | None) -> int:
    return EXIT_CODES.get(exit_reason or "failed", 1)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _fallback(text: str) -> str:
    provider, sep, model = text.partition(":")
    if not sep or provider not in KEY_VARS or not model:
        raise argparse.ArgumentTypeError(
            f"expected provider:model with provider anthropic or openai, got {text!r}"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="innerloop",
        description="The inner agentic loop as an explicit state machine.",
        epilog="exit codes: 0 complete, 1 failed, 2 usage, 3 limit reached, 4 aborted",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a task against a real model")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--provider", choices=sorted(KEY_VARS), default="anthropic")
    run.add_argument("--model", help="model id (default: a pinned model of the provider)")
    run.add_argument(
        "--fallback",
        action="append",
        default=[],
        type=_fallback,
        metavar="PROVIDER:MODEL",
        help="fallback model, repeatable, tried in order",
    )
    run.add_argument("--tools", default="", help="built-in tool sets, comma separated")
    run.add_argument("--workspace", type=Path, default=Path.cwd(), help="tools' root directory")
    run.add_argument("--max-turns", type=_positive_int, default=20)
    run.add_argument("--max-output-tokens", type=_positive_int, default=4096)
    run.add_argument("--context-budget", type=_positive_int, help="tokens per request")
    run.add_argument("--max-spend-tokens", type=_positive_int, help="tokens for the whole run")
    run.add_argument("--max-cost", type=_positive_float, help="US dollars for the whole run")
    run.add_argument("--base-url", help="API base URL (for the primary provider)")
    run.add_argument("--log", type=Path, help="write the JSONL event log here")
    run.add_argument("--system", type=Path, help="file holding the system prompt")
    run.add_argument("--prices", type=Path, help="JSON price table overriding the defaults")
    run.add_argument("--no-live", action="store_true", help="plain lines instead of live view")

    demo = sub.add_parser("demo", help="offline demo of every recovery branch (no API key)")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory")
    demo.add_argument("--no-live", action="store_true", help="plain lines instead of live view")

    from innerloop.diagrams import _cli as diagram_cli

    diagram_cli.add_parser(sub)
    return parser


def _load_prices(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from innerloop.recovery import DEFAULT_PRICES, Price

    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--prices: no such file {path}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--prices: {path} is not JSON: {exc}") from None
    table: dict[str, Any] = dict(DEFAULT_PRICES)
    for model, entry in data.items():
        try:
            table[model] = Price(**entry)
        except TypeError:
            raise UsageError(
                f"--prices: entry {model!r} must be an object with input, output and "
                f"optionally cache_read, cache_write (US dollars per million tokens)"
            ) from None
    return table


def _build_provider(provider: str, base_url: str | None) -> Any:
    var = KEY_VARS[provider]
    key = os.environ.get(var)
    if not key:
        raise UsageError(f"{var} is not set: export {var}=... to use the {provider} provider")
    from innerloop.providers import AnthropicProvider, OpenAIProvider

    if provider == "anthropic":
        return AnthropicProvider(api_key=key, base_url=base_url)
    return OpenAIProvider(api_key=key, base_url=base_url)


def _run_params(args: argparse.Namespace) -> Any:
    from innerloop import HarnessParams, SpendBudget
    from innerloop._errors import ParamsError

    system = ""
    if args.system is not None:
        try:
            system = args.system.read_text()
        except OSError as exc:
            raise UsageError(f"--system: cannot read {args.system}: {exc.strerror}") from None
    tools: tuple[Any, ...] = ()
    if args.tools:
        from innerloop.tools import builtin_tools

        try:
            tools = tuple(builtin_tools(*args.tools.split(","), workspace=args.workspace))
        except (ValueError, KeyError) as exc:
            raise UsageError(f"--tools: {exc}") from None
    spend = None
    if args.max_spend_tokens or args.max_cost:
        spend = SpendBudget(max_tokens=args.max_spend_tokens, max_cost_usd=args.max_cost)
    kwargs: dict[str, Any] = {}
    prices = _load_prices(args.prices)
    if prices is not None:
        kwargs["prices"] = prices
    try:
        return HarnessParams(
            model=f"{args.provider}:{args.model or DEFAULT_MODELS[args.provider]}",
            fallbacks=args.fallback,
            system=system,
            tools=tools,
            max_turns=args.max_turns,
            max_output_tokens=args.max_output_tokens,
            context_budget=args.context_budget,
            spend_budget=spend,
            **kwargs,
        )
    except ParamsError as exc:
        raise UsageError(str(exc)) from None


async def drive(run: Any, view: Any, log: Any) -> None:
    """Consume a run's events into a view and a log; SIGINT aborts the run cleanly."""
    loop = asyncio.get_running_loop()
    installed = False
    try:
        loop.add_signal_handler(signal.SIGINT, run.abort, "interrupted (SIGINT)")
        installed = True
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signals
        pass
    try:
        async for event in run.events():
            if log is not None:
                log.write(event)
            view.handle(event)
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


def view_for(state: Any, no_live: bool) -> Any:
    """The live view in a terminal, plain lines otherwise (or with ``no_live``)."""
    from innerloop._live import LiveView, PlainView

    if no_live or not sys.stdout.isatty():
        return PlainView()
    return LiveView(state)


def format_cost(cost_usd: float | None) -> str:
    """A run's cost for the screen; unknown when a model had no price."""
    return f"${cost_usd:.6f}" if cost_usd is not None else "unknown (no price)"


def _summary(state: Any, log_path: Path | None) -> None:
    cost = format_cost(state.cost_usd)
    print(
        f"exit_reason={state.exit_reason} turns={state.turns} "
        f"tokens_in={state.usage.input_tokens} tokens_out={state.usage.output_tokens} "
        f"cost={cost}"
    )
    if state.diagnostic:
        print(f"diagnostic: {json.dumps(state.diagnostic)[:500]}")
    if log_path is not None:
        print(f"event log: {log_path}")


def cmd_run(args: argparse.Namespace) -> int:
    from innerloop import Harness
    from innerloop._eventlog import EventLog

    params = _run_params(args)
    providers: dict[str, Any] = {}
    for i, choice in enumerate(params.model_chain):
        if choice.provider not in providers:
            providers[choice.provider] = _build_provider(
                choice.provider, args.base_url if i == 0 else None
            )
    harness = Harness(params, providers)
    run = harness.start(args.task)
    log = EventLog(args.log, {"command": "run", "model": str(params.model)}) if args.log else None

    async def play(view: Any) -> None:
        try:
            await drive(run, view, log)
        finally:
            for provider in providers.values():
                await provider.aclose()

    try:
        with view_for(run.state, args.no_live) as view:
            asyncio.run(play(view))
    finally:
        if log is not None:
            log.close()
    _summary(run.state, args.log)
    return exit_code(run.state.exit_reason)


def cmd_demo(args: argparse.Namespace) -> int:
    from innerloop._demo import run_demo

    state = run_demo(args.out, live=not args.no_live and sys.stdout.isatty())
    return exit_code(state.exit_reason)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "diagram":
            from innerloop.diagrams import _cli as diagram_cli

            return diagram_cli.run(args)
    except UsageError as exc:
        print(f"innerloop {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    parser.error(f"unknown command {args.command!r}")
    return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
