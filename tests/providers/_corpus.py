"""The recorded corpus in tests/fixtures/corpus as replayable cases (see SOURCES.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import attrs
import yaml

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


@attrs.frozen
class Case:
    """One recorded response: where it came from, what was asked, what came back."""

    id: str
    provider: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    request: Any

    @property
    def streaming(self) -> bool:
        return "json" not in self.content_type

    @property
    def content_type(self) -> str:
        for k, v in self.headers:
            if k.lower() == "content-type":
                return v
        return "text/event-stream"

    def decoded(self) -> bytes:
        """The body as the client sees it (gzip undone)."""
        if any(k.lower() == "content-encoding" and "gzip" in v for k, v in self.headers):
            return gzip.decompress(self.body)
        return self.body


def _provider(url: str) -> str:
    """``anthropic``, ``openai`` (Chat Completions), ``responses`` (OpenAI's Responses
    API), or ``other`` (files, vector stores, another provider's API)."""
    if "anthropic" in url:
        return "anthropic"
    if "openai" in url and url.endswith("/responses"):
        return "responses"
    if "openai" in url and "/chat/completions" in url:
        return "openai"
    return "other"


def _headers(raw: Any) -> tuple[tuple[str, str], ...]:
    return tuple(
        (str(k), str(item))
        for k, v in (raw or {}).items()
        for item in (v if isinstance(v, list) else [v])
    )


def _body(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode()
    return json.dumps(raw).encode()


def _yaml_cases(path: Path, rel: str) -> list[Case]:
    data = yaml.safe_load(path.read_text())
    cases = []
    for i, interaction in enumerate(data["interactions"]):
        request, response = interaction["request"], interaction["response"]
        headers = _headers(response.get("headers"))
        if "parsed_body" in response:
            body = _body(response["parsed_body"])
            if not any(k.lower() == "content-type" for k, _ in headers):
                headers += (("content-type", "application/json"),)
        else:
            body = _body(response["body"]["string"])
        request_body = request.get("parsed_body") or request.get("body")
        cases.append(
            Case(
                f"{rel}#{i}",
                _provider(request["uri"]),
                int(response["status"]["code"]),
                headers,
                body,
                request_body,
            )
        )
    return cases


def _snapshot_cases(path: Path, rel: str) -> list[Case]:
    cases = []
    for i, interaction in enumerate(json.loads(path.read_text())):
        request, response = interaction["request"], interaction["response"]
        body = response["body"]
        headers = _headers(response.get("headers"))
        if isinstance(body, str) and "content-type" not in dict(headers):
            headers += (("content-type", "text/event-stream"),)
        cases.append(
            Case(
                f"{rel}#{i}",
                _provider(request["url"]),
                int(response["status_code"]),
                headers,
                _body(body),
                request.get("body"),
            )
        )
    return cases


def load_cases(providers: tuple[str, ...] = ("anthropic", "openai")) -> list[Case]:
    """Every response of ``providers`` in the corpus (by default Anthropic Messages and
    OpenAI Chat Completions), in a stable order."""
    cases: list[Case] = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        sse = (("content-type", "text/event-stream"),)
        if path.suffix == ".yaml":
            cases += _yaml_cases(path, rel)
        elif path.suffix == ".json":
            cases += _snapshot_cases(path, rel)
        elif path.suffix == ".txt":
            cases.append(Case(rel, "anthropic", 200, sse, path.read_bytes(), None))
        elif path.suffix == ".bin":
            cases.append(Case(rel, "openai", 200, sse, path.read_bytes(), None))
    return [c for c in cases if c.provider in providers]
