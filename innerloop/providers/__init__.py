"""Canonical messages <-> provider wire formats, and the provider protocol."""

from innerloop.providers._base import ModelStream, Provider
from innerloop.providers._normalize import Dialect, WireRequest, build_request, normalize

__all__ = ["Dialect", "ModelStream", "Provider", "WireRequest", "build_request", "normalize"]
