"""Command line: ``innerloop run | runs | demo | diagram | replay | ui | serve | eval``.

Exit codes (also in docs/reference/cli.md):

====  ==========================================================
0     the model finished (model_complete or tasks_complete)
1     the run failed (an unrecoverable provider error, see the log)
2     bad usage: unknown option, bad value, missing API key (an OpenAI-compatible
      server given by --base-url needs none)
3     a limit was reached (max_turns_exceeded or budget_exceeded)
4     aborted (Ctrl-C / SIGINT, or the host aborted)
5     suspended: the run waits for an answer (``innerloop runs resume``)
====  ==========================================================
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from innerloop._boot import ABORTED_EXIT
from innerloop._console import Interrupted, drive, format_cost, signals_interrupt, view_for
from innerloop._local_cli import (
    LOCAL_MAX_OUTPUT_TOKENS,
    add_local_option,
    local_prices,
    serving_locally,
)
from innerloop.fsm._locate import add_spec_option

__all__ = ["EXIT_CODES", "main"]

EXIT_CODES = {
    "model_complete": 0,
    "tasks_complete": 0,
    "failed": 1,
    "max_turns_exceeded": 3,
    "budget_exceeded": 3,
    "aborted": ABORTED_EXIT,
    "suspended": 5,
}
USAGE_ERROR = 2
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
MAX_OUTPUT_TOKENS = 4096
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
        epilog=(
            "exit codes: 0 complete, 1 failed, 2 usage, 3 limit reached, 4 aborted, 5 suspended"
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a task against a real model")
    run.add_argument("task", help="what the agent should do")
    add_run_options(run)
    run.add_argument("--db", metavar="URL", help="checkpoint the run into this store")
    run.add_argument("--run-id", help="the run's id in the store (default: a new one)")
    add_local_option(run)

    demo = sub.add_parser("demo", help="offline demo of every recovery branch (no API key)")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory")
    demo.add_argument("--no-live", action="store_true", help="plain lines instead of live view")
    _add_ui_options(run)
    _add_ui_options(demo)

    from innerloop import _replay_cli
    from innerloop.diagrams import _cli as diagram_cli
    from innerloop.evals import _cli as evals_cli

    _add_runs_parser(sub)
    diagram_cli.add_parser(sub)
    _replay_cli.add_parser(sub)
    _add_ui_parser(sub)
    _add_serve_parser(sub)
    evals_cli.add_eval_parser(sub)
    return parser


def add_run_options(run: argparse.ArgumentParser) -> None:
    """The options that build a run's params and providers (``run``, ``runs resume``)."""
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
    add_spec_option(
        run,
        "the machine to run (default: the default machine); runs resume takes the one "
        "the run recorded from here (a recorded import path is never imported)",
    )
    run.add_argument("--workspace", type=Path, default=Path.cwd(), help="tools' root directory")
    run.add_argument("--max-turns", type=_positive_int, default=20)
    run.add_argument(
        "--max-output-tokens",
        type=_positive_int,
        help=f"per turn (default {MAX_OUTPUT_TOKENS}; {LOCAL_MAX_OUTPUT_TOKENS} with --local)",
    )
    run.add_argument("--context-budget", type=_positive_int, help="tokens per request")
    run.add_argument("--max-spend-tokens", type=_positive_int, help="tokens for the whole run")
    run.add_argument("--max-cost", type=_positive_float, help="US dollars for the whole run")
    run.add_argument("--base-url", help="API base URL (for the primary provider)")
    run.add_argument("--log", type=Path, help="write the JSONL event log here")
    run.add_argument("--system", type=Path, help="file holding the system prompt")
    run.add_argument("--prices", type=Path, help="JSON price table overriding the defaults")
    run.add_argument("--no-live", action="store_true", help="plain lines instead of live view")


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
    """The provider for ``provider``, with its key from the environment; an OpenAI-compatible
    server at ``base_url`` (a local one) needs none, as OpenAIProvider does not."""
    var = KEY_VARS[provider]
    key = os.environ.get(var) or None
    if key is None and not (provider == "openai" and base_url):
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
    prices = local_prices(args, _load_prices(args.prices))
    if prices is not None:
        kwargs["prices"] = prices
    try:
        return HarnessParams(
            model=f"{args.provider}:{args.model or DEFAULT_MODELS[args.provider]}",
            fallbacks=args.fallback,
            system=system,
            tools=tools,
            max_turns=args.max_turns,
            max_output_tokens=args.max_output_tokens
            or (LOCAL_MAX_OUTPUT_TOKENS if getattr(args, "local", False) else MAX_OUTPUT_TOKENS),
            context_budget=args.context_budget,
            spend_budget=spend,
            **kwargs,
        )
    except ParamsError as exc:
        raise UsageError(str(exc)) from None


def _summary(state: Any, log_path: Path | None, run_id: str | None = None) -> None:
    cost = format_cost(state.cost_usd)
    print(
        f"exit_reason={state.exit_reason} turns={state.turns} "
        f"tokens_in={state.usage.input_tokens} tokens_out={state.usage.output_tokens} "
        f"{'(estimated: the server reported no usage) ' if state.usage.estimated else ''}"
        f"cost={cost}"
    )
    if state.diagnostic:
        print(f"diagnostic: {json.dumps(state.diagnostic)[:500]}")
    if state.interrupt is not None and state.final_state == "suspended":
        asked = state.interrupt
        print(f"waiting for an answer to interrupt {asked.id!r}: {json.dumps(asked.payload)[:500]}")
    if run_id is not None:
        print(f"run id: {run_id}")
    if log_path is not None:
        print(f"event log: {log_path}")


def build_harness(args: argparse.Namespace, db: Any) -> tuple[Any, dict[str, Any]]:
    """The harness the run options describe (checkpointing into ``db``: a store URL or
    an open store), and its providers."""
    from innerloop import DEFAULT_SPEC, Harness
    from innerloop.checkpoint import store_errors

    params = _run_params(args)
    base_url = _base_url(args.base_url)
    providers: dict[str, Any] = {}
    for i, choice in enumerate(params.model_chain):
        if choice.provider not in providers:
            providers[choice.provider] = _build_provider(
                choice.provider, base_url if i == 0 else None
            )
    machine = getattr(args, "machine", None)
    if machine is None:
        specs = _specs(args)
        if len(specs) > 1:
            raise UsageError("--spec: give one machine to run")
        machine = specs[0] if specs else None
    try:
        machine = DEFAULT_SPEC if machine is None else machine
        return Harness(params, providers, checkpointer=db, machine=machine), providers
    except store_errors() as exc:
        raise UsageError(f"--db: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """An error's message in one line (a driver's may hold several)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def cmd_run(args: argparse.Namespace) -> int:
    with serving_locally(args, UsageError):  # --local: the model server, for the run
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from innerloop.checkpoint import CheckpointError, driver_errors

    harness, providers = build_harness(args, args.db)
    try:
        run = harness.start(args.task, run_id=args.run_id)
    except driver_errors() as exc:
        raise UsageError(f"--db: {_first_line(exc)}") from None
    except CheckpointError as exc:
        raise UsageError(f"--run-id: {exc}") from None
    return drive_run(run, providers, args)


def drive_run(run: Any, providers: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Drive a run in the terminal (live view, log, signals, the web view with --ui); its
    exit code."""
    if getattr(args, "ui", False) and args.log is None:  # the web view tails the run's log
        args.log = Path(tempfile.mkdtemp(prefix="innerloop-ui-")) / "run.jsonl"
    with _serving(args, args.log, [run.machine]):
        log = _open_log(args.log, {"command": args.command, "model": str(run.params.model)})
        return _drive(run, providers, args, log)


def _drive(run: Any, providers: Mapping[str, Any], args: argparse.Namespace, log: Any) -> int:

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
    _summary(run.state, args.log, run.run_id)
    return exit_code(run.state.exit_reason)


def _serving(args: argparse.Namespace, log: Path | None, machines: Sequence[Any]) -> Any:
    """With ``--ui``, the live web view (drawing runs on ``machines``) served while the
    block runs; else nothing."""
    if not getattr(args, "ui", False):
        return contextlib.nullcontext()
    return _ui_cli().serving(args, log, Interrupted, UsageError, machines)


def cmd_demo(args: argparse.Namespace) -> int:
    from innerloop._demo import NESTED_SPEC, run_demo

    with _serving(args, args.out / "events.jsonl", [NESTED_SPEC]):
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
    if args.command == "runs":
        return cmd_runs(args)
    if args.command == "ui":
        return int(_ui_cli().run(args, Interrupted, UsageError))
    if args.command == "serve":
        return int(_serve_cli().run(args, Interrupted, UsageError))
    if args.command == "eval":
        from innerloop.evals import _cli as evals_cli

        return evals_cli.eval_command(args, UsageError)
    if args.command == "replay":
        from innerloop import _replay_cli

        return _replay_cli.run(args)
    from innerloop.diagrams import _cli as diagram_cli

    return diagram_cli.run(args)


# -- innerloop ui, and --ui -------------------------------------------------------------

UI_HELP = """innerloop ui: the live web view of runs.

    innerloop ui [--runs DIR] [--db URL] [--port N] [--host H] [--spec MODULE:ATTR] [--open]
                 [--harness MODULE:ATTR]

It lists the runs of a folder of JSONL event logs (default: ./runs; logs still being
written are followed) and of a checkpoint store; for one run it shows the machine with
the current state highlighted live, the trace with edge counts, the transitions, the tool
calls and the tokens and cost of each turn. It listens on 127.0.0.1 unless --host says
otherwise; Ctrl-C stops it.

With --harness (the run's Harness, with its checkpoint store: what innerloop runs resume
would build), the page answers the question a suspended run waits on (approve, deny, or
a typed answer), through harness.resume; its store is the one listed when --db is not
given.

run --ui and demo --ui serve it during the run and print the run's URL; the server stops
with the command, or with --ui-wait goes on serving after the run until Ctrl-C.
"""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: a free one), got {value}")
    return value


def _add_ui_parser(subparsers: Any) -> None:
    ui = subparsers.add_parser(
        "ui",
        help="serve the live web view of runs (event logs, a checkpoint store)",
        description=UI_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ui.add_argument("--runs", type=Path, metavar="DIR", help="a folder of JSONL event logs")
    ui.add_argument("--db", metavar="URL", help="a checkpoint store (sqlite:///runs.db, ...)")
    ui.add_argument("--port", type=_port, help="default 8321; 0 for a free one")
    ui.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    add_spec_option(
        ui,
        "a machine the runs may have recorded (repeatable); each run is drawn on its "
        "own machine, found among these (a recorded import path is never imported)",
    )
    ui.add_argument("--open", action="store_true", help="open the page in a browser")
    ui.add_argument(
        "--harness",
        metavar="MODULE:ATTR",
        help="the runs' Harness (with checkpointer=, or a function of no argument returning "
        "one): the page answers what a suspended run waits on through its resume",
    )


def _add_ui_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ui", action="store_true", help="serve the live web view of the run")
    p.add_argument("--ui-port", type=_port, help="the web view's port (default 8321; 0: free)")
    p.add_argument("--ui-host", default="127.0.0.1", help="the web view's address")
    p.add_argument("--ui-wait", action="store_true", help="serve on after the run, to Ctrl-C")
    p.add_argument("--ui-open", action="store_true", help="open the web view in a browser")


def _ui_cli() -> Any:
    """``innerloop.ui._cli``; a UsageError naming the extra when it is not installed."""
    return _optional_cli("innerloop.ui._cli", "the live view", "ui")


def _optional_cli(module: str, what: str, extra: str) -> Any:
    """The command's ``module``; a UsageError naming ``extra`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or f"the {extra} extra").split(".")[0]
        raise UsageError(f"{what} needs {missing}: pip install 'innerloop[{extra}]'") from None


# -- innerloop serve -------------------------------------------------------------------


def _add_serve_parser(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a harness: OpenAI chat completions and MCP (see docs/guides/serve.md)",
    )
    serve.add_argument(
        "target", metavar="MODULE:ATTR", help="a Harness, or a function of no argument giving one"
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=_port, default=8000, help="default 8000")
    serve.add_argument("--token", help="the bearer token wanted (off loopback: one is generated)")
    serve.add_argument("--name", default="innerloop", help="the model and tool name served")
    serve.add_argument("--stdio", action="store_true", help="MCP over stdin and stdout instead")
    serve.add_argument("--runs", type=Path, metavar="DIR", help="log each run's events here")


def _serve_cli() -> Any:
    """``innerloop.serve._cli``; a UsageError naming the extra when it is not installed."""
    return _optional_cli("innerloop.serve._cli", "innerloop serve", "serve")


# -- innerloop runs ---------------------------------------------------------------------

RUNS_HELP = """innerloop runs: the runs of a checkpoint store.

    innerloop runs list --db URL
    innerloop runs show RUN_ID --db URL [--diagram FILE] [--spec MODULE:ATTR]...
    innerloop runs resume RUN_ID --db URL [--answer JSON [--interrupt ID]] [run options]
    innerloop runs fork RUN_ID --db URL [--at N] [--message TEXT] [--answer JSON [--interrupt ID]]
        [run options]
    innerloop runs rerun RUN_ID --db URL --harness MODULE:ATTR [--at N] [--message TEXT]

resume and fork take the options of innerloop run (provider, model, tools, ...):
params are code and are never stored, so give the ones the run was started with.
rerun runs it again from checkpoint N on the harness --harness names (other params) and
prints both runs side by side (--json OUT writes the comparison).
"""


def _add_runs_parser(subparsers: Any) -> None:
    runs = subparsers.add_parser(
        "runs",
        help="list, show, resume, fork or rerun the runs of a checkpoint store",
        description=RUNS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = sub.add_parser("list", help="every run: status, exit reason, turns, cost")
    show = sub.add_parser("show", help="a run's path of states, its interrupt, its last message")
    show.add_argument("run_id")
    show.add_argument("--diagram", metavar="FILE", help="write the run's trace diagram here")
    add_spec_option(
        show,
        "a machine the run may have recorded (repeatable; a recorded import path is never "
        "imported: name it here)",
    )
    resume = sub.add_parser("resume", help="continue a suspended or interrupted run")
    resume.add_argument("run_id")
    fork = sub.add_parser("fork", help="start a new run from a checkpoint of another")
    fork.add_argument("run_id")
    fork.add_argument("--at", type=int, help="the checkpoint (default: the latest)")
    fork.add_argument("--message", help="a user message to add first")
    from innerloop.evals import _cli as evals_cli

    rerun = evals_cli.add_rerun_parser(sub)
    for p in (listing, show, resume, fork, rerun):
        p.add_argument("--db", metavar="URL", required=True, help="the checkpoint store")
    for p in (resume, fork):
        p.add_argument("--answer", help="the answer to a suspended run (JSON, else text)")
        p.add_argument(
            "--interrupt",
            metavar="ID",
            help="the interrupt the answer is for (`runs show` prints its id); refused when "
            "the run waits on another, or the interrupt was answered already",
        )
        add_run_options(p)


def _answer(text: str | None) -> Any:
    from innerloop._json import JSONTooDeep, parse_json

    if text is None:
        return None
    try:
        return parse_json(text)
    except JSONTooDeep as exc:
        raise UsageError(f"--answer: the JSON is {exc.msg}; give a flatter answer") from None
    except ValueError:
        return text


def cmd_runs(args: argparse.Namespace) -> int:
    from innerloop._errors import ResumeError
    from innerloop.checkpoint import CheckpointError, driver_errors

    try:
        if args.runs_command in ("list", "show"):
            return _read_only(args)
        if args.runs_command == "rerun":
            from innerloop.evals import _cli as evals_cli

            return evals_cli.rerun_command(args, UsageError)
        return _continue(args)
    except driver_errors() as exc:
        raise UsageError(f"--db: {_first_line(exc)}") from None
    except (CheckpointError, ResumeError) as exc:
        raise UsageError(str(exc)) from None


def _read_only(args: argparse.Namespace) -> int:
    from innerloop.checkpoint import open_checkpointer, store_errors

    try:
        store = open_checkpointer(args.db)
    except store_errors() as exc:
        raise UsageError(f"--db: {_first_line(exc)}") from None
    try:
        if args.runs_command == "list":
            _list(store)
        else:
            _show(store, args)
    finally:
        store.close()
    return 0


def _list(store: Any) -> None:
    from innerloop._console import format_cost

    runs = store.runs()  # read first: a store that cannot be read prints no table
    print(f"{'run id':34} {'status':10} {'exit reason':20} {'turns':>5} {'cost':>10}  updated")
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.updated))
        parent = f"  (fork of {r.parent_run_id} at {r.parent_seq})" if r.parent_run_id else ""
        print(
            f"{r.run_id:34} {r.status:10} {r.exit_reason or '-':20} {r.turns:>5} "
            f"{format_cost(r.cost_usd):>10}  {when}{parent}"
        )


def _show(store: Any, args: argparse.Namespace) -> None:
    from innerloop.checkpoint import decode
    from innerloop.diagrams import Trace, build_diagram

    infos = store.checkpoints(args.run_id)
    last = decode(store.rows(args.run_id))
    state = last.state
    path = [i.state for i in infos]
    print(
        f"run {args.run_id}: {state.final_state or 'running'}, {state.turns} turns, "
        f"{len(infos)} checkpoints"
    )
    record = store.machine(args.run_id)
    print(f"machine: {record}" if record else "machine: not recorded (an older innerloop)")
    print("path: " + " -> ".join(path))
    if state.interrupt is not None:
        asked = state.interrupt
        print(f"waiting ({asked.kind}, interrupt {asked.id!r}): {json.dumps(asked.payload)}")
    if state.history:
        message = state.history[-1]
        print(f"last message ({message.role}): {message.text[:500]}")
    if args.diagram:
        from innerloop.diagrams._cli import SUFFIX_FORMATS, _output

        steps = tuple((i.source, i.state, i.guard) for i in infos if i.source is not None)
        trace = Trace(steps, state.final_state, state.exit_reason)
        spec = _recorded_machine(record, args, f"run {args.run_id}")
        fmt = SUFFIX_FORMATS.get(Path(args.diagram).suffix.lower(), "svg")
        Path(args.diagram).write_bytes(_output(build_diagram(spec, trace=trace), fmt))
        print(f"trace diagram: {args.diagram}")


def _recorded_machine(record: Any, args: argparse.Namespace, what: str) -> Any:
    """The machine a stored run recorded, found among ``--spec`` (a store is data: its
    recorded import path is never imported); a usage error (one line) naming the
    ``--spec`` to pass when it cannot be found."""
    from innerloop.fsm import MachineNotFound, find_machine

    try:
        return find_machine(record, _specs(args), what=what)
    except MachineNotFound as exc:
        raise UsageError(str(exc)) from None


def _specs(args: argparse.Namespace) -> list[Any]:
    from innerloop.fsm import load_spec

    try:
        return [load_spec(target) for target in args.spec]
    except ValueError as exc:
        raise UsageError(f"--spec: {exc}") from None


def _continue(args: argparse.Namespace) -> int:
    from innerloop._messages import Message
    from innerloop.checkpoint import open_checkpointer, store_errors

    answer = _answer(args.answer)
    if args.interrupt is not None:
        from innerloop.fsm import Answer

        answer = Answer(args.interrupt, answer)
    try:
        store = open_checkpointer(args.db)
    except store_errors() as exc:
        raise UsageError(f"--db: {_first_line(exc)}") from None
    try:
        record = store.machine(args.run_id)
        args.machine = _recorded_machine(record, args, f"run {args.run_id}")
    except BaseException:
        store.close()
        raise
    # the store read for the machine record is the one the run goes on in: opened once
    harness, providers = build_harness(args, store)
    if args.runs_command == "resume":
        run = harness.resume(args.run_id, answer)
    else:
        message = args.message

        def edit(state: Any) -> None:
            if message is not None:
                state.history.append(Message.user(message))

        run = harness.fork(args.run_id, at=args.at, edit=edit, answer=answer)
    return int(drive_run(run, providers, args))


if __name__ == "__main__":
    sys.exit(main())
