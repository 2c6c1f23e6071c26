"""One converter: every message block, event, error, params, tool result and state goes
through ``json.dumps``/``json.loads`` and comes back the same; the event log keeps its
documented shape and old logs still load."""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import innerloop._events as events_module
from innerloop import (
    Event,
    HarnessParams,
    HarnessState,
    ModelChoice,
    PromptCache,
    ProviderError,
    RecoveryPolicy,
    ServerTool,
    SpendBudget,
    Thinking,
    ToolSpec,
    read_event_log,
)
from innerloop._convert import holds_code, structure, unstructure
from innerloop._errors import ConversionError, ErrorCategory
from innerloop._events import Finished
from innerloop._messages import (
    DOCUMENT_TYPES,
    IMAGE_TYPES,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    block_from_dict,
    message_from_dict,
)
from innerloop.durable import (
    state_from_dict,
    state_to_dict,
    tool_result_from_dict,
    tool_result_to_dict,
)
from innerloop.examples.approval import ApprovalOutcome
from innerloop.fsm import Outcome
from innerloop.recovery._pricing import Price
from innerloop.tools import ToolContext, ToolOutput
from innerloop.tools._spec import ToolCallResult

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = (
    TextBlock,
    ThinkingBlock,
    RedactedThinkingBlock,
    ImageBlock,
    DocumentBlock,
    ToolUseBlock,
    ToolResultBlock,
)
EVENTS = tuple(
    cls
    for name in events_module.__all__
    if attrs.has(cls := getattr(events_module, name)) and issubclass(cls, Event)
)

# -- strategies built from the declared types ------------------------------------------------

json_data = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
"""What a field typed ``Any`` holds: JSON data."""

finite = st.floats(allow_nan=False, allow_infinity=False)

urls = st.text(max_size=8).map(lambda t: "https://example.com/" + t)
names = st.none() | st.text(max_size=8)
MAGIC = {
    "image/png": b"\x89PNG\r\n\x1a\n",
    "image/jpeg": b"\xff\xd8\xff",
    "image/gif": b"GIF89a",
    "image/webp": b"RIFF\x00\x00\x00\x00WEBP",
}
"""The first bytes of each image type (ImageBlock checks them)."""
CHECKED = {
    ImageBlock: st.builds(
        lambda media_type, rest: ImageBlock.from_bytes(MAGIC[media_type] + rest, media_type),
        st.sampled_from(IMAGE_TYPES),
        st.binary(max_size=8),
    )
    | st.builds(ImageBlock.from_url, urls),
    DocumentBlock: st.builds(
        DocumentBlock.from_bytes,
        st.binary(max_size=8).map(lambda b: b"%PDF-" + b),
        title=names,
        filename=names,
    )
    | st.builds(DocumentBlock.from_text, st.text(min_size=1, max_size=8), title=names)
    | st.builds(DocumentBlock.from_url, urls, st.sampled_from(DOCUMENT_TYPES), title=names),
}
"""The classes that check their values when made, by hand."""

provider_errors = st.builds(
    ProviderError,
    st.sampled_from(ErrorCategory),
    st.text(),
    provider=st.text(),
    status=st.none() | st.integers(100, 599),
    retry_after=st.none() | st.floats(0, 1e6),
    raw=st.none() | st.text(),
)


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of the declared type ``tp`` (attrs classes field by field)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return json_data
    if tp is ProviderError:
        return provider_errors
    if tp in CHECKED:
        return CHECKED[tp]
    if tp in (str, int, bool, type(None)):
        return st.from_type(tp)
    if tp is float:
        return finite
    if origin is not None:
        return for_generic(tp, origin, args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(tp)
    if tp is Event:  # a child's event inside a ChildEvent: any of the others
        return st.sampled_from([c for c in EVENTS if c.type != "child_event"]).flatmap(for_type)
    if isinstance(tp, type) and attrs.has(tp):
        return st.builds(tp, **fields_of(tp))
    raise AssertionError(f"no strategy for {tp!r}: add one to for_type")


def for_generic(tp: Any, origin: Any, args: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """A strategy for a union, a literal or a container type ``tp``."""
    if origin in (typing.Union, types.UnionType):
        return st.one_of([for_type(a) for a in args])
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (list, tuple) and (origin is list or args[1:] == (Ellipsis,)):
        return st.lists(for_type(args[0]), max_size=3).map(origin)
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
        return st.dictionaries(for_type(args[0]), for_type(args[1]), max_size=3)
    raise AssertionError(f"no strategy for {tp!r}: add one to for_type")


def fields_of(cls: type[Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: for_type(hints[f.name]) for f in attrs.fields(cls) if f.init and f.name not in skip
    }


def same(a: Any, b: Any, skip: frozenset[str] = frozenset()) -> bool:
    """Deep equality that also holds the class of every part (and reads eq=False fields)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, ProviderError):
        return vars(a) == vars(b) and str(a) == str(b)
    if attrs.has(type(a)):
        return all(
            same(getattr(a, f.name), getattr(b, f.name))
            for f in attrs.fields(type(a))
            if f.name not in skip
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def _written(cls: type[Any]) -> list[str]:
    """The fields an event's log line holds, in order: those its constructor takes."""
    return [f.name for f in attrs.fields(cls) if f.init]


def through_json(data: Any) -> Any:
    return json.loads(json.dumps(data))


# -- content blocks and messages ------------------------------------------------------------


@attrs.frozen
class NotedText(TextBlock):
    """A host's own kind of text block."""


class TestBlocks:
    @pytest.mark.parametrize("cls", BLOCKS, ids=lambda c: c.__name__)
    @given(data=st.data())
    def test_every_block_round_trips(self, cls: type[Any], data: st.DataObject) -> None:
        """Each block type comes back equal, as its own class, from its JSON form."""
        block = data.draw(for_type(cls))
        back = block_from_dict(through_json(block.to_dict()))
        assert same(back, block)

    @pytest.mark.parametrize("cls", BLOCKS, ids=lambda c: c.__name__)
    @given(data=st.data())
    def test_a_block_is_its_type_tag_then_its_fields(
        self, cls: type[Any], data: st.DataObject
    ) -> None:
        """The documented shape: ``type`` first, then every init field, nothing else."""
        out = data.draw(for_type(cls)).to_dict()
        names = [f.name for f in attrs.fields(cls) if f.init]
        assert list(out) == ["type", *names]
        assert out["type"] == attrs.fields(cls).type.default

    @given(for_type(Message))
    def test_messages_round_trip(self, message: Message) -> None:
        """A message with any mix of blocks comes back equal."""
        assert same(message_from_dict(through_json(message.to_dict())), message)

    def test_the_tool_use_shape_is_unchanged(self) -> None:
        """A tool_use block is written exactly as before the converter."""
        block = ToolUseBlock("toolu_1", "add", {"a": 2, "b": [1, 2]})
        assert block.to_dict() == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "add",
            "input": {"a": 2, "b": [1, 2]},
        }

    def test_a_subclass_of_a_block_keeps_its_tag(self) -> None:
        """A host's subclass of a block is written with its base's ``type``, in a message
        too, and reads back as the base block."""
        message = Message.user([NotedText("hi")])
        assert message.to_dict() == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
        assert message_from_dict(message.to_dict()) == Message.user("hi")

    def test_missing_optional_fields_take_their_defaults(self) -> None:
        """Older or sparser data (no signature, no is_error) still reads."""
        assert block_from_dict({"type": "thinking", "thinking": "hm"}) == ThinkingBlock("hm")
        assert block_from_dict({"type": "tool_result", "tool_use_id": "t", "content": "c"}) == (
            ToolResultBlock("t", "c")
        )

    def test_an_unknown_block_type_names_the_known_ones(self) -> None:
        """A block type nobody defines is refused with the list of known types."""
        with pytest.raises(ConversionError) as caught:
            block_from_dict({"type": "video", "data": "x"})
        assert str(caught.value) == (
            "unknown content block type 'video'; expected one of text, thinking, "
            "redacted_thinking, image, document, tool_use, tool_result, server_tool"
        )

    def test_a_bad_message_names_every_bad_path(self) -> None:
        """Reading bad data reports each problem with where it is."""
        with pytest.raises(ConversionError) as caught:
            message_from_dict({"role": "user", "content": [{"type": "text"}, {"type": "x"}]})
        assert str(caught.value) == (
            "cannot read a Message from this data: required field missing @ $.content[0].text; "
            "unknown content block type 'x'; expected one of text, thinking, "
            "redacted_thinking, image, document, tool_use, tool_result, server_tool @ $.content[1]"
        )


# -- events -----------------------------------------------------------------------------------


@attrs.frozen
class Approved(Event):
    """An event of a custom state, defined outside the package."""

    type: typing.ClassVar[str] = "test_approved"
    call_id: str
    by: str | None


FINISHED = {
    "type": "finished",
    "exit_reason": "model_complete",
    "final_state": "model_complete",
    "turns": 1,
    "usage": {"input_tokens": 3},
    "cost_usd": None,
}


class TestWrongJSONTypes:
    """A value of the wrong JSON type is refused naming its field, never read as an empty
    object, split into characters or coerced (issue 22: ``usage: "lots"`` was a zero
    ``Usage``)."""

    @pytest.mark.parametrize(
        ("change", "problem"),
        [
            ({"usage": "lots"}, "expected an object (Usage), got a string ('lots') @ $.usage"),
            ({"usage": [1, 2]}, "expected an object (Usage), got an array @ $.usage"),
            ({"usage": 7}, "expected an object (Usage), got a number (7) @ $.usage"),
            ({"cost_usd": "1.5"}, "expected a number, got a string ('1.5') @ $.cost_usd"),
            ({"cost_usd": True}, "expected a number, got a boolean (True) @ $.cost_usd"),
            ({"turns": "3"}, "expected an integer, got a string ('3') @ $.turns"),
            ({"turns": 1.5}, "expected an integer, got a number (1.5) @ $.turns"),
            ({"exit_reason": 5}, "expected a string, got a number (5) @ $.exit_reason"),
            (
                {"usage": {"input_tokens": "many"}},
                "expected an integer, got a string ('many') @ $.usage.input_tokens",
            ),
        ],
    )
    def test_an_event_field(self, change: dict[str, Any], problem: str) -> None:
        with pytest.raises(ConversionError) as caught:
            Event.from_dict({**FINISHED, **change})
        assert str(caught.value) == f"cannot read a Event from this data: {problem}"

    def test_the_right_types_still_read(self) -> None:
        """An int where a float is expected is a float; nulls where allowed stay."""
        event = Event.from_dict({**FINISHED, "cost_usd": 2})
        assert event == Finished("model_complete", "model_complete", 1, Usage(3), 2.0)
        assert isinstance(event.cost_usd, float)

    def test_a_string_is_not_an_array(self) -> None:
        """A message's content as a string is refused, not read character by character."""
        with pytest.raises(ConversionError) as caught:
            message_from_dict({"role": "user", "content": "hi"})
        assert str(caught.value) == (
            "cannot read a Message from this data: expected an array, got a string ('hi') "
            "@ $.content"
        )

    def test_a_whole_line_that_is_not_an_object(self) -> None:
        with pytest.raises(ConversionError) as caught:
            Finished.from_dict("finished")  # type: ignore[arg-type]
        assert str(caught.value) == "expected an object (Finished), got a string ('finished')"
        with pytest.raises(ConversionError) as caught:
            structure("lots", Usage)
        assert str(caught.value) == "expected an object (Usage), got a string ('lots')"


class TestEvents:
    def test_every_event_class_is_covered(self) -> None:
        """The round trip below runs over all twenty-one event classes of the package."""
        assert len(EVENTS) == 21

    @pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.type)
    @given(data=st.data())
    def test_every_event_round_trips(self, cls: type[Event], data: st.DataObject) -> None:
        """Each event comes back equal from its log line, read through the base class."""
        event = data.draw(for_type(cls))
        back = Event.from_dict(through_json(event.to_dict()))
        assert same(back, event)

    @pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.type)
    @given(data=st.data())
    def test_an_event_is_its_type_then_its_fields(
        self, cls: type[Event], data: st.DataObject
    ) -> None:
        """The log line: ``type`` first, then every field in declaration order (a field
        no constructor takes, such as ``run_started``'s maker of its messages, is not
        data)."""
        out = data.draw(for_type(cls)).to_dict()
        assert out["type"] == cls.type
        assert attrs.has(cls)
        assert list(out) == ["type", *_written(cls)]

    def test_the_documented_fields_are_the_written_ones(self) -> None:
        """docs/event-log.md lists each event type with exactly the fields it has."""
        documented: dict[str, set[str]] = {}
        text = (ROOT / "docs" / "event-log.md").read_text()
        for row in re.finditer(r"^\| `([a-z_]+)` \| (.+) \|$", text, re.M):
            cell = re.sub(r"\([^)]*\)", "", row[2])
            documented[row[1]] = set(re.findall(r"`([a-z_]+)`", cell))
        written = {cls.type: set(_written(cls)) for cls in EVENTS}
        assert documented == written

    @given(for_type(Approved))
    def test_events_of_custom_states_load_too(self, event: Approved) -> None:
        """An event class defined outside the package is found by its type."""
        assert Event.from_dict(through_json(event.to_dict())) == event

    def test_an_unknown_event_type_says_what_to_import(self) -> None:
        """A type no imported class has is refused, naming the known ones."""
        with pytest.raises(ConversionError, match=r"^unknown event type 'nope'; import the module"):
            Event.from_dict({"type": "nope"})

    def test_a_subclass_reads_only_its_own_type(self) -> None:
        """Asking for one event class refuses a line of another."""
        line = {"type": "finished", "index": 0, "text": "a"}
        with pytest.raises(ConversionError) as caught:
            events_module.TextDelta.from_dict(line)
        assert str(caught.value) == "a 'finished' event is not a 'text_delta' event"

    def test_a_value_with_no_json_form_is_refused(self) -> None:
        """A diagnostic holding an object JSON cannot carry fails loudly, naming its type."""
        event = events_module.Abort("stop", {"handle": object()})
        with pytest.raises(ConversionError) as caught:
            event.to_dict()
        assert str(caught.value).startswith(
            "a value of type object is not JSON data and has no JSON form; keep JSON data"
        )


class TestEventLog:
    LOG = ROOT / "tests" / "fixtures" / "eventlog" / "demo-v1.jsonl"

    def test_a_log_written_before_the_converter_still_loads(self) -> None:
        """Every line of a log the hand-written code wrote reads back as a typed event and
        is written again byte for byte (less ``seq`` and ``t``), but for the fields added
        since, which read back as their defaults (a response's ``id``, the final
        history's fingerprint, the interrupt waited on: None)."""
        lines = read_event_log(self.LOG)
        assert len(lines) == 128
        kinds = set()
        responses = 0
        for line in lines:
            event = Event.from_dict(line)
            kinds.add(event.type)
            expected = {k: v for k, v in line.items() if k not in ("seq", "t")}
            if "response" in expected:
                assert "id" not in expected["response"]
                expected["response"] = {**expected["response"], "id": None}
                responses += 1
            if expected["type"] == "finished":
                assert "history" not in expected
                assert "interrupt" not in expected
                expected["history"] = expected["interrupt"] = None
            assert event.to_dict() == _usage_not_estimated(expected)
        assert len(kinds) == 13
        assert responses > 0


def _usage_not_estimated(data: Any) -> Any:
    """``data`` with ``estimated: False`` in each usage (a field added since: a usage the
    provider reported)."""
    if isinstance(data, dict):
        out = {k: _usage_not_estimated(v) for k, v in data.items()}
        if "input_tokens" in out and "output_tokens" in out:
            out.setdefault("estimated", False)
        return out
    if isinstance(data, list):
        return [_usage_not_estimated(v) for v in data]
    return data


# -- errors -----------------------------------------------------------------------------------


class TestProviderError:
    @given(provider_errors)
    def test_every_category_round_trips(self, error: ProviderError) -> None:
        """All fields, the raw body included, come back; the message is rebuilt the same."""
        back = structure(through_json(unstructure(error)), ProviderError)
        assert same(back, error)

    def test_every_category_is_drawn(self) -> None:
        """The strategy above covers each category."""
        assert {e.value for e in ErrorCategory} == {
            "rate_limited",
            "overloaded",
            "transient",
            "context_overflow",
            "fatal",
        }

    def test_to_dict_leaves_the_raw_body_out(self) -> None:
        """``error.to_dict()`` (what a diagnostic embeds) carries no raw body."""
        error = ProviderError(ErrorCategory.FATAL, "no", status=401, raw="secret body")
        assert error.to_dict() == {
            "category": "fatal",
            "message": "no",
            "provider": "",
            "status": 401,
            "retry_after": None,
            "retry_after_header": None,
        }


# -- tool results -----------------------------------------------------------------------------


class TestToolCallResult:
    @given(for_type(ToolCallResult))
    def test_tool_results_round_trip(self, result: ToolCallResult) -> None:
        """Every field, ``value`` (JSON data) included."""
        assert same(structure(through_json(unstructure(result)), ToolCallResult), result)

    def test_a_durable_step_carries_a_value_as_json_or_none(self) -> None:
        """Across a durable step a tool's value keeps its JSON form, or becomes None when
        it has none (a tool may return any object; the machine never reads it)."""
        shaped = ToolCallResult("t1", "f", "out", value=(1, {"a": frozenset({2})}))
        opaque = attrs.evolve(shaped, value=object())
        assert tool_result_from_dict(through_json(tool_result_to_dict(shaped))).value == [
            1,
            {"a": [2]},
        ]
        back = tool_result_from_dict(through_json(tool_result_to_dict(opaque)))
        assert back.value is None
        assert same(back, attrs.evolve(opaque, value=None))


# -- params -----------------------------------------------------------------------------------


async def _noop(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("")


TOOLS = tuple(
    ToolSpec(name, f"The {name} tool.", {"type": "object"}, _noop, category=category)
    for name, category in (("read", "file"), ("shell", "shell"), ("fetch", "network"))
)
models = st.builds(
    ModelChoice,
    st.sampled_from(["anthropic", "openai", "scripted"]),
    st.sampled_from(["claude-sonnet-4-5-20250929", "gpt-4o-mini-2024-07-18", "m-20250101"]),
)
ANSWER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
positive = st.floats(0.001, 1e4)
fraction = st.floats(0.01, 0.99)


SERVER_TOOLS = [ServerTool("web_search", {"max_uses": 2}), ServerTool("code_execution")]


@st.composite
def harness_params(draw: st.DrawFn) -> HarnessParams:
    chain = draw(st.lists(models, min_size=1, max_size=3, unique=True))
    tools = draw(st.lists(st.sampled_from(TOOLS), unique_by=lambda t: t.name, max_size=3))
    thinking = draw(st.none() | st.builds(Thinking, st.integers(1024, 4096)))
    if chain[0].model.startswith("gpt-4o"):  # a primary model that does not reason
        thinking = None
    max_output = draw(st.integers(1, 8192)) + ((thinking.budget_tokens or 0) if thinking else 0)
    choices = ["auto", "none"]
    if tools and thinking is None:
        choices += ["any", *(f"tool:{t.name}" for t in tools)]
    kwargs: dict[str, Any] = {
        "model": chain[0],
        "system": draw(st.text()),
        "tools": tools,
        "fallbacks": chain[1:],
        "temperature": None if thinking else draw(st.none() | st.floats(0, 2)),
        "top_p": draw(st.none() | st.floats(0.01, 1)),
        "max_output_tokens": max_output,
        "max_turns": draw(st.integers(1, 100)),
        "context_budget": draw(st.none() | st.integers(max_output + 1, max_output + 10**6)),
        "spend_budget": draw(
            st.none()
            | st.builds(SpendBudget, st.none() | st.integers(1, 10**9), st.none() | positive)
        ),
        "tool_timeouts": draw(
            st.dictionaries(st.sampled_from(["file", "shell", "network", "code"]), positive)
        ),
        "tool_choice": draw(st.sampled_from(choices)),
        "thinking": thinking,
        "stop_sequences": draw(st.lists(st.text(min_size=1), max_size=2)),
        "recovery": draw(
            st.builds(
                RecoveryPolicy,
                backoff_initial=st.floats(0.001, 64),
                max_rate_limit_retries=st.integers(0, 10),
                budget_compact_target=fraction,
                continuation_message=st.text(min_size=1).filter(str.strip),
            )
        ),
        "prices": draw(
            st.dictionaries(
                st.text(min_size=1).filter(str.strip),
                st.builds(Price, positive, positive, positive, positive),
                max_size=2,
            )
        ),
        "max_parallel_tools": draw(st.integers(1, 16)),
        "call_deadline": draw(st.none() | positive),
        "eager_tools": draw(st.booleans()),
        "strict_models": draw(st.booleans()),
        "cache_tools": draw(st.booleans()),
        "cache_last_user_turn": draw(st.booleans()),
        "prompt_cache": draw(
            st.builds(
                PromptCache,
                system=st.booleans(),
                tools=st.booleans(),
                last_messages=st.integers(0, 2),
                ttl=st.just("1h"),
                messages_ttl=st.sampled_from([None, "5m", "1h"]),
                key=st.none() | st.text(min_size=1),
                retention=st.sampled_from([None, "in_memory", "24h"]),
            )
        ),
        "output_type": None,
        "max_output_repairs": draw(st.integers(0, 5)),
        "max_json_depth": draw(st.integers(1, 200)),
        "server_tools": draw(st.lists(st.sampled_from(SERVER_TOOLS), unique_by=lambda t: t.name)),
        "prepare_tools": None,  # a function, and sources of tools, are the host's: not data
        "tool_sources": (),
    }
    if kwargs["tool_choice"] in ("auto", "none"):  # a forced tool never lets it answer
        # a type crosses JSON only as a JSON schema dict
        kwargs["output_type"] = draw(st.none() | st.just(ANSWER))
    kwargs["output_mode"] = "auto"
    if kwargs["output_type"] is not None:  # the final-result tool needs tool calls allowed
        modes = ["auto", "native", "tool"] if kwargs["tool_choice"] == "auto" else ["native"]
        kwargs["output_mode"] = draw(st.sampled_from(modes))
    # a new HarnessParams field fails here until the strategy draws it
    assert set(kwargs) == {f.name for f in attrs.fields(HarnessParams) if f.init}
    return HarnessParams(**kwargs)


@attrs.frozen
class Hook:
    run: Callable[[], None]


class TestHarnessParams:
    @given(harness_params())
    def test_params_round_trip_with_tools_by_name(self, params: HarnessParams) -> None:
        """Params come back equal; each tool crosses as its name and is looked up again."""
        data = through_json(unstructure(params))
        assert data["tools"] == [t.name for t in params.tools]
        back = structure(data, HarnessParams, named=TOOLS)
        assert back == params
        assert all(a is b for a, b in zip(back.tools, params.tools, strict=True))
        assert isinstance(back.tool_timeouts, MappingProxyType)
        assert isinstance(back.prices, MappingProxyType)

    def test_tools_need_the_objects_to_look_up(self) -> None:
        """Without ``named=``, a tool name cannot become a tool again: the error says so."""
        data = unstructure(HarnessParams(model="scripted:m", tools=TOOLS[:1]))
        with pytest.raises(ConversionError) as caught:
            structure(data, HarnessParams)
        assert str(caught.value) == (
            "cannot read a HarnessParams from this data: ToolSpec 'read' holds code, which "
            "JSON does not carry; pass the ToolSpec objects to look names up in: "
            "structure(..., named=[...]) @ $.tools[0]"
        )

    def test_an_unknown_tool_name_lists_the_known_ones(self) -> None:
        """A name none of the given tools has is refused with the names that exist."""
        data = unstructure(HarnessParams(model="scripted:m", tools=TOOLS[:1]))
        with pytest.raises(ConversionError) as caught:
            structure(data, HarnessParams, named=TOOLS[1:])
        assert str(caught.value) == (
            "cannot read a HarnessParams from this data: no ToolSpec named 'read' among "
            "those passed in named= (known: fetch, shell); pass the one this data names "
            "@ $.tools[0]"
        )

    def test_a_bad_field_names_its_path(self) -> None:
        """A wrong type is reported at its path; the params' own checks still run."""
        data = unstructure(HarnessParams(model="scripted:m"))
        with pytest.raises(
            ConversionError, match=r"expected an integer, got a string \('many'\) @ \$\.max_turns$"
        ):
            structure({**data, "max_turns": "many"}, HarnessParams)

    def test_code_without_a_name_cannot_cross(self) -> None:
        """A class holding a callable and no ``name`` is refused with the fix."""
        assert holds_code(ToolSpec)
        assert holds_code(Hook)
        assert not holds_code(HarnessParams)
        with pytest.raises(ConversionError) as caught:
            unstructure(Hook(lambda: None))
        assert str(caught.value) == (
            "Hook holds code and has no 'name' field, so JSON cannot refer to it; give it a "
            "name field or keep it out of data that crosses JSON"
        )


# -- state ------------------------------------------------------------------------------------


class TestHarnessState:
    @settings(max_examples=50)
    @given(
        st.builds(
            HarnessState,
            **{
                **fields_of(HarnessState),
                "outcome": st.sampled_from([*Outcome, *ApprovalOutcome]),
            },
        )
    )
    def test_state_round_trips_with_nothing_skipped(self, state: HarnessState) -> None:
        """Every field of the state comes back the same, whatever its type: the state is
        plain data (a custom state's outcome included)."""
        back = state_from_dict(through_json(state_to_dict(state)))
        assert same(back, state)

    def test_a_requested_abort_crosses(self) -> None:
        """A pending abort comes back as a pending abort with its reason and time."""
        state = HarnessState()
        state.request_abort("host said stop")
        back = state_from_dict(through_json(state_to_dict(state)))
        assert back.abort == state.abort
        assert back.abort is not None
        assert back.abort.reason == "host said stop"


class Phase(enum.StrEnum):
    OPENED = "opened"
    FAILED = "failed"


@attrs.frozen
class Pending:
    reason: str
    at: dt.datetime


@attrs.define
class PlainState:
    """Shaped like the pure-data state: an enum outcome, an optional abort with a time."""

    outcome: Phase
    abort: Pending | None
    counters: Mapping[str, int] = attrs.field(factory=dict, converter=MappingProxyType)
    history: tuple[Message, ...] = ()
    error: ProviderError | None = None


class TestAnyDataClass:
    @given(
        st.builds(
            PlainState,
            st.sampled_from(Phase),
            st.none() | st.builds(Pending, st.text(), st.datetimes(timezones=st.just(dt.UTC))),
            st.dictionaries(st.text(), st.integers(), max_size=3),
            st.lists(for_type(Message), max_size=2).map(tuple),
            st.none() | provider_errors,
        )
    )
    def test_an_attrs_data_class_round_trips_generically(self, state: PlainState) -> None:
        """Enums, datetimes, optional classes, read-only mappings and tuples need no hook."""
        assert same(structure(through_json(unstructure(state)), PlainState), state)
