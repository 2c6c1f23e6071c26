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
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from innerloop._console import Interrupted, drive, format_cost, signals_interrupt, view_for

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
    from innerloop.recovery import DEFAULT_PRICES

    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--prices: no such file {path}") from None
    except OSError as exc:
        raise UsageError(f"--prices: cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--prices: {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"--prices: {path} must hold a JSON object "
            f'{{"model-prefix": {{"input": 3.0, "output": 15.0}}, ...}}, '
            f"got a JSON {type(data).__name__}"
        )
    table: dict[str, Any] = dict(DEFAULT_PRICES)
    table.update((model, _price(model, entry)) for model, entry in data.items())
    return table


def _price(model: str, entry: object) -> Any:
    from innerloop._errors import ParamsError
    from innerloop.recovery import Price

    shape = UsageError(
        f"--prices: entry {model!r} must be an object with input, output and "
        f"optionally cache_read, cache_write (US dollars per million tokens)"
    )
    if not isinstance(entry, Mapping):
        raise shape
    try:
        return Price(**entry)
    except TypeError:
        raise shape from None
    except ParamsError as exc:
        raise UsageError(f"--prices: entry {model!r}: {exc}") from None


def _base_url(url: str | None) -> str | None:
    """``url`` when it is an http(s) URL with a host (and a valid port), else a UsageError."""
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise UsageError(f"--base-url: {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--base-url: {url!r} is not a valid URL; give http(s)://HOST[:PORT][/PATH]"
        )
    return url


def _open_log(path: Path | None, header: Mapping[str, Any]) -> Any:
    """The event log at ``path`` (None without --log); a UsageError when it cannot be
    written."""
    if path is None:
        return None
    from innerloop._eventlog import EventLog

    try:
        return EventLog(path, header)
    except FileExistsError as exc:  # a file where a parent directory should be
        raise UsageError(f"--log: cannot write {path}: {exc.filename} is not a directory") from None
    except OSError as exc:
        raise UsageError(f"--log: cannot write {path}: {exc.strerror or exc}") from None


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

    params = _run_params(args)
    base_url = _base_url(args.base_url)
    providers: dict[str, Any] = {}
    for i, choice in enumerate(params.model_chain):
        if choice.provider not in providers:
            providers[choice.provider] = _build_provider(
                choice.provider, base_url if i == 0 else None
            )
    harness = Harness(params, providers)
    log = _open_log(args.log, {"command": "run", "model": str(params.model)})
    run = harness.start(args.task)

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
    prog = "innerloop"
    with signals_interrupt():
        try:
            args = _parser().parse_args(argv)
            prog = f"innerloop {args.command}"
            return _command(args)
        except UsageError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return USAGE_ERROR
        except Interrupted as exc:
            print(f"{prog}: interrupted by {exc.signame}", file=sys.stderr)
            return EXIT_CODES["aborted"]


def _command(args: argparse.Namespace) -> int:
    if args.command == "run":
        return cmd_run(args)
    if args.command == "demo":
        return cmd_demo(args)
    from innerloop.diagrams import _cli as diagram_cli

    return diagram_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
