"""Diagnostic payloads for aborted runs: what was asked and what came back, with message
content replaced by sha256 hashes and every API-key-like string removed."""

from __future__ import annotations

import hashlib
from typing import Any

from innerloop._errors import ProviderError
from innerloop._secrets import scrub_fields, scrub_secrets  # re-exported: it lived here first

__all__ = ["build_diagnostic", "hash_content", "scrub_secrets"]

_CONTENT_KEYS = frozenset({"text", "thinking", "content", "data", "arguments", "input"})


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(repr(value).encode()).hexdigest()


def hash_content(value: Any, key: str = "") -> Any:
    """A copy of a wire payload with every content field replaced by its sha256 (an object
    under a content key, such as a tool call's ``input``, is hashed whole)."""
    if isinstance(value, dict) and key in _CONTENT_KEYS:
        return _digest(value)
    if isinstance(value, dict):
        return {k: hash_content(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key in _CONTENT_KEYS:
            return [hash_content(v) for v in value]
        return [hash_content(v, key) for v in value]
    if key in _CONTENT_KEYS and value is not None:
        return _digest(value)
    return value


def build_diagnostic(
    error: ProviderError | None,
    request_payload: dict[str, Any] | None,
    *,
    phase: str,
    provider: str,
    model: str,
) -> dict[str, Any]:
    payload = dict(request_payload or {})
    if "system" in payload:
        payload["system"] = _digest(payload["system"])
    return {
        "phase": phase,
        "provider": provider,
        "model": model,
        "error": scrub_fields(error.to_dict()) if error is not None else None,
        "error_message": scrub_secrets(str(error)) if error is not None else None,
        "raw_response": scrub_secrets(error.raw) if error is not None and error.raw else None,
        "request": hash_content(payload),
    }
