"""The README's code examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from innerloop.testing import AnthropicServer, reply, tool_call

README = Path(__file__).resolve().parents[1] / "README.md"


def test_using_it_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 'Using it' example completes against an Anthropic-compatible server."""
    code = re.search(r"## Using it\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    script = [reply(tool_call("weather", {"city": "Lisbon"})), reply("It is sunny in Lisbon.")]
    with AnthropicServer(script) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-readme")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-readme")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        exec(compile(code.group(1), "README.md", "exec"), {})
        tool_result = server.requests[1].body["messages"][-1]["content"][0]
    assert capsys.readouterr().out == "model_complete It is sunny in Lisbon.\n"
    assert tool_result["content"] == "sunny in Lisbon"


def test_event_loop_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The event loop example: each ``match`` case prints what its event says."""
    code = re.search(r"```python\n([^`]*?match event:.*?)```", README.read_text(), re.S)
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out == (
        "[calling weather]\n[weather: sunny in Lisbon]\nSunny.\nmodel_complete after 2 turns\n"
    )


def test_testing_your_loop_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The 'Testing your loop' example: a loopback server, a 503 retried, a final state of
    the host's own."""
    code = re.search(r"## Testing your loop\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out == "escalated {'transient': 1}\n"


def test_pause_resume_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The 'Pause, resume and fork' example suspends for approval, writes runs.db, and
    resumes by run id to the end."""
    code = re.search(r"## Pause, resume and fork\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    script = [
        reply(tool_call("delete_file", {"path": "build.log"})),
        reply("Done: build.log is gone."),
    ]
    monkeypatch.chdir(tmp_path)
    with AnthropicServer(script) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-readme")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        exec(compile(code.group(1), "README.md", "exec"), {})
        tool_result = server.requests[1].body["messages"][-1]["content"][0]
    assert capsys.readouterr().out == (
        "suspended ['delete_file']\n"
        "model_complete Done: build.log is gone.\n"
        "[('finished', 'model_complete', 2)]\n"
    )
    assert tool_result["content"] == "deleted build.log"
    assert (tmp_path / "runs.db").exists()


def test_typed_output_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The 'Typed output' example repairs one answer and ends with the typed value."""
    code = re.search(r"## Typed output\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out == "model_complete city='Lisbon' celsius=21.5 1\n"


def test_final_result_tool_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The final-result tool example: an older Claude answers through the tool, one
    invalid call repaired by its error result, the last call accepted."""
    code = re.search(
        r"### Models without native structured output\n\n```python\n(.*?)```",
        README.read_text(),
        re.S,
    )
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out == (
        "model_complete city='Lisbon' celsius=21.5 1\naccepted\nfinal_result\n"
    )


def test_conversations_example_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The 'Conversations' example: two messages of one stored conversation, each with
    the history before it, then a fork that leaves it as it was."""
    code = re.search(r"### Conversations\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    script = [
        reply("Sorry to hear that. Which order?"),
        reply("Order 4711 ships today."),
        reply("Order 4711 is cancelled."),
    ]
    monkeypatch.chdir(tmp_path)
    with AnthropicServer(script) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-readme")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        exec(compile(code.group(1), "README.md", "exec"), {})
        sent = [[m["content"] for m in r.body["messages"]] for r in server.requests]
    assert capsys.readouterr().out == (
        "Sorry to hear that. Which order?\n"
        "Order 4711 ships today.\n"
        "2 [('ticket-4711', 2)]\n"
        "Order 4711 is cancelled. 4\n"
    )
    assert [len(messages) for messages in sent] == [1, 3, 5]
    assert (tmp_path / "chat.db").exists()
