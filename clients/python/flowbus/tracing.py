"""W3C Trace Context for what the client sends (PROTOCOL.md 4.5): the current OpenTelemetry
context when `opentelemetry-api` is installed and a span is active, nothing otherwise."""

from __future__ import annotations

from typing import Optional

Trace = tuple[str, str]
"""(traceparent, tracestate); ("", "") for none."""

NO_TRACE: Trace = ("", "")


def current_trace() -> Trace:
    """The traceparent and tracestate of the active OpenTelemetry span, or ("", "") without
    opentelemetry-api or outside a recording span."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return NO_TRACE
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def trace_for(traceparent: Optional[str], tracestate: str = "") -> Trace:
    """An explicit traceparent (and tracestate) when given, else the current context's."""
    return (traceparent, tracestate) if traceparent else current_trace()
