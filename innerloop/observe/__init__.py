"""Seeing a run: OpenTelemetry tracing and metrics (GenAI semantic conventions).

``Harness(params, providers, observers=[Tracing()])`` traces each run into the tracer and
meter providers the host set up (``pip install 'innerloop[otel]'`` brings the SDK and the
OTLP/HTTP exporter). Python logging needs nothing: the ``innerloop`` loggers are silent
until the host configures logging (``innerloop._log``).
"""

from innerloop.observe._otel import RunTrace, Tracing

__all__ = ["RunTrace", "Tracing"]
