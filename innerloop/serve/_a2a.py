"""A2A: the served harness as an agent other agents call, at ``/a2a`` (JSON-RPC 2.0, A2A
1.0; clients send ``A2A-Version: 1.0``) with its agent card at
``/a2a/.well-known/agent-card.json``.

A message is a task; its ``contextId`` is a conversation of the harness (``a2a:CONTEXT``:
the server keeps its history; a new context is a new conversation). The task works while
the run goes on (the model's text as status messages, each tool call and its result as
one with a data part: ``{"toolCall": {id, name, input}}``, ``{"toolResult": {id, name,
output, isError}}``), completes with the answer as an artifact, fails when the run ends
without one, and asks for input (``input-required``) when the run waits for an approval:
the next message on that task answers it (``yes`` or ``no``, or a data part
``{"approve": bool}`` or ``{call_id: bool}``). Cancelling the task aborts the run (one
waiting for input: its approval is refused, and the run aborted).

    SendMessage            the task once it ended or asks for input (returnImmediately:
                           at once, the run going on; GetTask follows it)
    SendStreamingMessage   the task, then its status and artifact updates (SSE)
    GetTask, ListTasks     the tasks kept (the last :data:`TASKS_KEPT`)
    CancelTask             abort the task's run
    SubscribeToTask, the push notification methods, GetExtendedAgentCard: an error that
    says they are not served

The JSON-RPC methods are written here, on the serve layer's own stream, and not served by
the ``a2a-sdk``'s request handler: with 200 streamed tasks at once on one process that
handler cost 12.9 to 15.4 ms of CPU a task and stalled its event loop by 90 to 201 ms
(``python bench/serve.py --only streams``: ``a2a sdk``), over serving's 50 ms target;
these cost 1.7 to 2.3 ms a task, the longest stall 20 to 29 ms, as the other protocols'
streams do. The ``a2a-sdk`` still gives the agent card,
the request types (each request's params are parsed as its protobuf), the error codes,
and is the client the tests hold tasks with.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import attrs
from a2a.helpers.proto_helpers import get_data_parts, get_message_text
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.types import Message as A2AMessage
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from innerloop._errors import ResumeError, SessionError
from innerloop._session import Session
from innerloop.events import RunEvent, TextDelta, ToolExecuted, ToolUseComplete
from innerloop.fsm import HarnessState
from innerloop.serve._runs import (
    ID_CHARS,
    Reading,
    Refused,
    Served,
    answer_of,
    event_stream,
    question,
    wire_json,
)

__all__ = ["A2A", "a2a_card_routes", "refused"]

CONTEXT_PREFIX = "a2a:"
"""A context's conversation id is its contextId under this prefix: no A2A message can go
on with a conversation another protocol's client holds (that one wants its token)."""
YES = frozenset({"yes", "y", "true", "approve", "approved", "ok"})
VERSION = "1.0"
"""The A2A version served (a request's ``A2A-Version`` header: its major must be 1)."""
TASKS_KEPT = 10_000
"""The tasks kept for GetTask and ListTasks (the oldest go first)."""
CANCEL_SECONDS = 10.0
"""How long CancelTask waits for the aborted run to end."""
PAGE = 50
"""ListTasks' page size when the request names none (at most 100)."""

SUBMITTED = TaskState.Name(TaskState.TASK_STATE_SUBMITTED)
WORKING = TaskState.Name(TaskState.TASK_STATE_WORKING)
COMPLETED = TaskState.Name(TaskState.TASK_STATE_COMPLETED)
FAILED = TaskState.Name(TaskState.TASK_STATE_FAILED)
CANCELED = TaskState.Name(TaskState.TASK_STATE_CANCELED)
INPUT_REQUIRED = TaskState.Name(TaskState.TASK_STATE_INPUT_REQUIRED)
ENDED = frozenset({COMPLETED, FAILED, CANCELED})
AGENT = Role.Name(Role.ROLE_AGENT)
JSON = "application/json"
NOT_SERVED = {
    "SubscribeToTask": UnsupportedOperationError(
        message="SubscribeToTask is not served: the stream that sent the task carries its "
        "updates; GetTask follows it"
    ),
    "GetExtendedAgentCard": ExtendedAgentCardNotConfiguredError(
        message="no extended agent card: the public one is all there is"
    ),
    **{
        method: PushNotificationNotSupportedError(
            message="push notifications are not served: stream the task or poll GetTask"
        )
        for method in (
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
        )
    },
}


def _timestamp(seconds: float) -> str:
    """``seconds`` (``time.time()``) as protobuf's JSON writes a timestamp (in UTC)."""
    whole = int(seconds)
    micro = int((seconds - whole) * 1_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(whole))}.{micro:06d}Z"


@attrs.define(eq=False)
class _Task:
    """One task as kept: its state, status message, history and artifacts (each in A2A's
    JSON), and the run working on it. Its history and artifacts are kept as one line of
    JSON each, read back when asked for: strings, which the garbage collector does not
    walk (a kept task and its conversation: 23 tracked objects, not 30 as dicts)."""

    id: str
    context_id: str
    session: Session
    state: str = SUBMITTED
    message: dict[str, Any] | None = None
    changed: float = attrs.Factory(time.time)
    """When its state last changed (``time.time()``)."""
    history: list[str] = attrs.Factory(list)
    artifacts: tuple[str, ...] = ()
    reading: Reading | None = None
    """Its run's reading while the run goes on."""
    cancelled: bool = False
    runner: asyncio.Task[None] | None = None
    """What reads the run of a message answered at once (``returnImmediately``)."""
    said: int = 0
    """Messages the agent sent on this task (their ids count them)."""

    def agent_message(self, said: str | dict[str, Any]) -> dict[str, Any]:
        """A message of the agent on this task: a text, or one part."""
        self.said += 1
        return {
            "messageId": f"{self.id}-{self.said}",
            "contextId": self.context_id,
            "taskId": self.id,
            "role": AGENT,
            "parts": [{"text": said} if isinstance(said, str) else said],
        }

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state, "timestamp": _timestamp(self.changed)}
        if self.message is not None:
            status["message"] = self.message
        return status

    def set(self, state: str, text: str | None = None) -> None:
        """Now in ``state``, with a status message saying ``text`` (kept in its history)."""
        self.state, self.changed = state, time.time()
        self.message = None if text is None else self.agent_message(text)
        if self.message is not None:
            self.history.append(wire_json(self.message))

    def update(self) -> dict[str, Any]:
        """Its status as a stream's ``statusUpdate``."""
        return {
            "statusUpdate": {
                "taskId": self.id,
                "contextId": self.context_id,
                "status": self.status(),
            }
        }

    def json(self, history_length: int | None = None, artifacts: bool = True) -> dict[str, Any]:
        """The task as A2A's ``Task`` (the last ``history_length`` messages of its history)."""
        task: dict[str, Any] = {
            "id": self.id,
            "contextId": self.context_id,
            "status": self.status(),
        }
        if artifacts and self.artifacts:
            task["artifacts"] = [json.loads(artifact) for artifact in self.artifacts]
        history = self.history if not history_length else self.history[-history_length:]
        if history and history_length != 0:
            task["history"] = [json.loads(message) for message in history]
        return task


def rpc_error(request_id: Any, error: A2AError, status: int = 200) -> JSONResponse:
    """A JSON-RPC error response for ``error`` (its code as the A2A SDK maps it)."""
    code = JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603)
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": error.message}}
    return JSONResponse(body, status_code=status)


def refused(request: Refused) -> JSONResponse:
    """A request refused before its method was read (a body too big, too slow, not JSON):
    a JSON-RPC error under that HTTP status."""
    error = JSONParseError if request.unparsed else InvalidRequestError
    return rpc_error(None, error(message=str(request)), request.status)


def _params(kind: type[Any], params: Any) -> Any:
    """``params`` parsed as the request type ``kind`` (unknown fields left out)."""
    if not isinstance(params, dict):
        raise InvalidParamsError(message="params: a JSON object is wanted")
    try:
        return ParseDict(params, kind(), ignore_unknown_fields=True)
    except ParseError as exc:
        raise InvalidParamsError(message=f"params: {exc}") from None


def _approval(message: A2AMessage) -> Any:
    """The answer an input-required task's next message gives."""
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict):
            return data.get("approve", data)
    return get_message_text(message).strip().lower() in YES


def _checked_version(request: Request) -> None:
    version = request.headers.get("a2a-version", "")
    if version.split(".")[0] != VERSION.split(".")[0]:
        said = f"A2A-Version {version!r}" if version else "no A2A-Version header (A2A 0.3)"
        raise VersionNotSupportedError(
            message=f"{said} is not served: send the header A2A-Version: {VERSION}"
        )


class A2A:
    """The JSON-RPC endpoint: the handler ``POST /a2a`` runs (the serve layer's endpoint
    reads the body and watches for the client going away), and the tasks it keeps."""

    def __init__(self) -> None:
        self.tasks: collections.OrderedDict[str, _Task] = collections.OrderedDict()

    async def __call__(self, served: Served, request: Request, body: dict[str, Any]) -> Response:
        request_id = body.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
            request_id = None
        try:
            method = body.get("method")
            if body.get("jsonrpc") != "2.0" or not isinstance(method, str):
                raise InvalidRequestError(
                    message='a JSON-RPC 2.0 request is wanted: {"jsonrpc": "2.0", "method": '
                    '..., "params": {...}, "id": ...}'
                )
            if method in NOT_SERVED:
                raise NOT_SERVED[method]
            _checked_version(request)
            params = body.get("params", {})
            if method == "SendStreamingMessage":
                task, reading = self._start(served, _params(SendMessageRequest, params), True)
                steps = self._steps(task, reading, request_id, wire=True)
                await anext(steps)  # primed: see _steps
                return event_stream(steps, reading)
            result = await self._answer(served, method, params)
        except A2AError as exc:
            return rpc_error(request_id, exc)
        except (SessionError, ResumeError, ValueError) as exc:
            return rpc_error(request_id, InvalidParamsError(message=str(exc)))
        answer = wire_json({"jsonrpc": "2.0", "id": request_id, "result": result})
        return Response(answer, media_type="application/json")

    async def _answer(self, served: Served, method: str, params: Any) -> dict[str, Any]:
        """The result of a method answered whole."""
        if method == "SendMessage":
            request = _params(SendMessageRequest, params)
            task, reading = self._start(served, request, False)
            steps = self._steps(task, reading)
            if request.configuration.return_immediately:
                task.runner = asyncio.get_running_loop().create_task(_drained(steps))
            else:
                await _drained(steps)
            return {"task": task.json(_length(request.configuration))}
        if method == "GetTask":
            got = _params(GetTaskRequest, params)
            return self._task(got.id).json(_length(got))
        if method == "CancelTask":
            cancelled = self._task(_params(CancelTaskRequest, params).id)
            return (await self._cancel(served, cancelled)).json()
        if method == "ListTasks":
            return self._list(_params(ListTasksRequest, params))
        raise MethodNotFoundError(message=f"method {method!r}: no such A2A method")

    def _task(self, task_id: str) -> _Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise TaskNotFoundError(
                message=f"task {task_id!r}: no such task (the last {TASKS_KEPT} are kept)"
            )
        return task

    def _start(
        self, served: Served, request: SendMessageRequest, events: bool
    ) -> tuple[_Task, Reading]:
        """The task the request's message starts (or answers, when it names one waiting
        for input), its run read from now on."""
        message = request.message
        if not message.parts:
            raise InvalidParamsError(message="params.message.parts: one part or more is wanted")
        if message.task_id:
            task = self._task(message.task_id)
            if message.context_id and message.context_id != task.context_id:
                raise InvalidParamsError(
                    message=f"task {task.id!r} is of context {task.context_id!r}, "
                    f"not {message.context_id!r}"
                )
            if task.state != INPUT_REQUIRED:
                raise UnsupportedOperationError(
                    message=f"task {task.id!r} is {task.state}: only a task waiting for input "
                    f"({INPUT_REQUIRED}) takes another message; send one without taskId to "
                    "go on with its context"
                )
            run = task.session.resume(_approval(message))
        else:
            context_id = message.context_id or str(uuid.uuid4())
            if len(context_id) > ID_CHARS:
                raise InvalidParamsError(
                    message=f"params.message.contextId: at most {ID_CHARS} characters"
                )
            session = served.session(f"{CONTEXT_PREFIX}{context_id}")
            run = session.start(get_message_text(message))
            task = _Task(str(uuid.uuid4()), context_id, session)
            self.tasks[task.id] = task
            while len(self.tasks) > TASKS_KEPT:
                self.tasks.popitem(last=False)
        said = MessageToDict(message) | {"taskId": task.id, "contextId": task.context_id}
        task.history.append(wire_json(said))
        task.reading = served.read(run, events=events, session=task.session)
        return task, task.reading

    async def _steps(
        self, task: _Task, reading: Reading, request_id: Any = None, wire: bool = False
    ) -> AsyncGenerator[Any, None]:
        """The task's updates (A2A's stream responses) as its run goes on, the task kept
        up to date with them; with ``wire``, SendStreamingMessage's events: the task, then
        its updates, each a JSON-RPC response of ``request_id`` in one line of JSON (one
        generator a stream, not one reading another: fewer objects a stream holds). A
        stream's steps are primed (``await anext(steps)``: its first yield is ``""``), so
        that however the stream ends, even before its first byte, this generator's
        ``finally`` runs: a task whose run was left going is cancelled."""
        try:
            if wire:
                yield ""
                yield _wired(request_id, {"task": task.json()})
            if not task.cancelled:  # (cancelled before its steps began: it stays so)
                task.set(WORKING)
            yield _wired(request_id, task.update()) if wire else task.update()
            async for event in reading:
                part = _part(event)
                if part is not None:
                    status = {"state": WORKING, "message": task.agent_message(part)}
                    update = {
                        "statusUpdate": {
                            "taskId": task.id,
                            "contextId": task.context_id,
                            "status": status,
                        }
                    }
                    yield _wired(request_id, update) if wire else update
            made = _settled(task, reading.run.state)
            if made is not None:
                yield _wired(request_id, made) if wire else made
            yield _wired(request_id, task.update()) if wire else task.update()
        except Exception as exc:  # the run raised: the task failed, saying why
            task.set(FAILED, f"the run failed: {type(exc).__name__}: {exc}")
            yield _wired(request_id, task.update()) if wire else task.update()
        finally:
            task.reading = None
            if task.state in (SUBMITTED, WORKING):  # its stream left before the end
                if reading.run.state.final_state is None:  # the run is being aborted
                    task.set(CANCELED, "the client went away: the run was aborted")
                else:
                    _settled(task, reading.run.state)

    async def _cancel(self, served: Served, task: _Task) -> _Task:
        """``task`` cancelled: its run aborted (one waiting for input: its approval
        refused, the run aborted at once), waited for (at most :data:`CANCEL_SECONDS`):
        its context takes the next message once this answers."""
        if task.state in ENDED:
            raise TaskNotCancelableError(
                message=f"task {task.id!r} is {task.state}: an ended task is not cancelled"
            )
        task.cancelled = True
        reading = task.reading
        if task.state == INPUT_REQUIRED:
            reading = served.read(task.session.resume(False), events=False, session=task.session)
        if reading is not None:
            reading.run.abort("the A2A task was cancelled")
        task.set(CANCELED, "the task was cancelled")
        if reading is not None:
            await asyncio.wait([reading.task], timeout=CANCEL_SECONDS)
        return task

    def _list(self, request: ListTasksRequest) -> dict[str, Any]:
        size = request.page_size if request.HasField("page_size") else PAGE
        if not 1 <= size <= 100:
            raise InvalidParamsError(message=f"params.pageSize: 1 to 100, not {size}")
        token = request.page_token or "0"
        if not token.isdigit():
            raise InvalidParamsError(
                message="params.pageToken: the nextPageToken an earlier answer gave"
            )
        state = TaskState.Name(request.status) if request.status else None
        after = (
            request.status_timestamp_after.ToNanoseconds() / 1e9
            if request.HasField("status_timestamp_after")
            else None
        )
        tasks = [
            task
            for task in reversed(self.tasks.values())
            if (not request.context_id or task.context_id == request.context_id)
            and (state is None or task.state == state)
            and (after is None or task.changed > after)
        ]
        start = int(token)
        length = _length(request)
        return {
            "tasks": [
                task.json(length, artifacts=request.include_artifacts)
                for task in tasks[start : start + size]
            ],
            "nextPageToken": str(start + size) if start + size < len(tasks) else "",
            "pageSize": size,
            "totalSize": len(tasks),
        }


def _part(event: RunEvent) -> dict[str, Any] | None:
    """What a working status says of ``event``: the model's text, a tool call or its
    result (a data part); None for the rest."""
    kind = type(event)
    if kind is TextDelta:
        assert isinstance(event, TextDelta)
        return {"text": event.text} if event.text else None
    if kind is ToolUseComplete:
        assert isinstance(event, ToolUseComplete)
        call = event.tool_use
        said = {"id": call.id, "name": call.name, "input": dict(call.input)}
        return {"data": {"toolCall": said}, "mediaType": JSON}
    if kind is ToolExecuted:
        assert isinstance(event, ToolExecuted)
        done = {
            "id": event.tool_use_id,
            "name": event.name,
            "output": event.output,
            "isError": event.is_error,
        }
        return {"data": {"toolResult": done}, "mediaType": JSON}
    return None


def _settled(task: _Task, state: HarnessState[Any]) -> dict[str, Any] | None:
    """``task`` in the state its run ended in (``state``); when it completed, the update
    that gives its answer as an artifact."""
    if task.cancelled:  # CancelTask said so already
        if task.state != CANCELED:
            task.set(CANCELED, "the task was cancelled")
    elif state.final_state == "aborted":
        task.set(CANCELED, answer_of(state))
    elif state.final_state == "suspended" and state.interrupt is not None:
        task.set(INPUT_REQUIRED, question(state.interrupt))
    elif state.exit_reason == "model_complete" or state.output_data is not None:
        answer = answer_of(state)
        artifact = {
            "artifactId": f"{task.id}-answer",
            "name": "answer",
            "parts": [{"text": answer}],
        }
        task.artifacts += (wire_json(artifact),)
        task.history.append(wire_json(task.agent_message(answer)))
        task.set(COMPLETED)
        return {
            "artifactUpdate": {
                "taskId": task.id,
                "contextId": task.context_id,
                "artifact": artifact,
                "lastChunk": True,
            }
        }
    else:
        task.set(FAILED, answer_of(state))
    return None


def _length(request: Any) -> int | None:
    """The history length a request asks for (None: all of it)."""
    return request.history_length if request.HasField("history_length") else None


def _wired(request_id: Any, result: dict[str, Any]) -> str:
    """``result`` as a JSON-RPC response of ``request_id``, one line of JSON."""
    return wire_json({"jsonrpc": "2.0", "id": request_id, "result": result})


async def _drained(steps: AsyncIterator[dict[str, Any]]) -> None:
    async for _ in steps:
        pass


def a2a_card_routes(name: str, url: str) -> list[Route]:
    """The agent card's routes (``url``: where clients reach ``/a2a``)."""
    card = AgentCard(
        name=name,
        description=f"The innerloop agent {name!r}: a message in, its answer out.",
        version="1",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=VERSION)
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=name, name=name, description="Ask the agent.", tags=["agent"])],
    )
    return create_agent_card_routes(card, card_url="/a2a/.well-known/agent-card.json")
