"""Amazon's event-stream framing (``application/vnd.amazon.eventstream``), as Amazon
Bedrock streams a model's answer, split into the API stream events it carries.

Each frame is one message: a prelude (total and headers length, CRC32), headers
(``:message-type``, ``:event-type`` or ``:exception-type``), a payload and a CRC32 of the
whole. A ``chunk`` event's payload is ``{"bytes": base64}``, the bytes being one event of
the Messages API stream as JSON; an exception message (``throttlingException``,
``modelStreamErrorException``, ...) ends the stream with its error. Frames are read, and
their checksums checked, by botocore's ``EventStreamBuffer``, the decoder the AWS SDKs
(and Anthropic's own Bedrock client) use.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from innerloop._errors import ProviderError
from innerloop.providers._errors import error_from_body
from innerloop.providers._http import DEFAULT_MAX_EVENT_BYTES, malformed, too_large

__all__ = ["EventStreamSplitter", "botocore_eventstream"]


def botocore_eventstream() -> Any:
    """botocore's event-stream module, imported now; an ``ImportError`` naming the extra
    when botocore is not installed."""
    try:
        import botocore.eventstream
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ImportError(
            "reading Bedrock's event stream needs botocore: pip install 'innerloop[bedrock]' "
            "(or 'anthropic[bedrock]')"
        ) from exc
    return botocore.eventstream


class EventStreamSplitter:
    """Splits an event stream into the payloads of its ``chunk`` events (the JSON of one
    API stream event each), with :class:`~innerloop.providers._http.SSESplitter`'s
    interface. A frame that fails its checksum, a chunk that is not base64 JSON, or bytes
    left over at the end are a malformed response (transient: retried once); an exception
    message raises the ``ProviderError`` its type stands for; an event longer than
    ``max_event_bytes`` is malformed too, before more of it is buffered."""

    __slots__ = ("_buffer", "_max", "_parser_error", "_pending", "_provider")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, provider: str = "") -> None:
        eventstream = botocore_eventstream()
        self._buffer = eventstream.EventStreamBuffer()
        self._parser_error: type[Exception] = eventstream.ParserError
        self._pending = 0  # bytes fed that no whole message has used yet
        self._max = max_event_bytes
        self._provider = provider

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer.add_data(chunk)
        self._pending += len(chunk)
        found: list[bytes] = []
        try:
            for message in self._buffer:
                self._pending -= message.prelude.total_length
                data = self._payload(message)
                if data is not None:
                    found.append(data)
        except self._parser_error as exc:
            what = f"an event-stream frame cannot be read ({type(exc).__name__}: {exc})"
            raise malformed(self._provider, what) from None
        if self._pending > self._max:
            raise too_large(self._provider, self._max)
        return found

    def finish(self) -> list[bytes]:
        """Nothing more: raises when the stream ended inside a frame."""
        if self._pending:
            what = f"the stream ended inside an event-stream frame ({self._pending} bytes of it)"
            raise malformed(self._provider, what)
        return []

    def _payload(self, message: Any) -> bytes | None:
        headers = message.headers
        kind = headers.get(":message-type")
        if kind == "event":
            if headers.get(":event-type") != "chunk":
                return None  # no other event carries part of the answer
            try:
                return base64.b64decode(json.loads(message.payload)["bytes"], validate=True)
            except (ValueError, LookupError, TypeError):  # binascii.Error is a ValueError
                what = 'a chunk event whose payload is not {"bytes": base64}'
                raise malformed(self._provider, what, message.payload) from None
        if kind in ("exception", "error"):
            raise self._exception(kind, headers, message.payload)
        return None

    def _exception(self, kind: str, headers: dict[str, Any], payload: bytes) -> ProviderError:
        """An ``exception`` message (``:exception-type``, ``{"message": ...}``) or an
        ``error`` one (``:error-code``, ``:error-message``)."""
        text = payload.decode("utf-8", "replace")
        if kind == "exception":
            name = str(headers.get(":exception-type") or "exception")
            try:
                body = json.loads(text)
                message = str(body.get("message") or body.get("Message") or text)
            except (ValueError, AttributeError):
                message = text
        else:
            name = str(headers.get(":error-code") or "error")
            message = str(headers.get(":error-message") or text)
        return error_from_body(
            self._provider, {"error": {"type": name, "message": message}}, raw=text or None
        )
