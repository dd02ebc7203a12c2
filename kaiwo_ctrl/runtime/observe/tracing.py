"""OpenTelemetry tracing: one span per reconcile, off unless asked for.

``setup_tracing("console")`` prints spans to stderr; ``"otlp"`` uses the OTLP
exporter when ``opentelemetry-exporter-otlp`` is installed (endpoint from
the standard ``OTEL_EXPORTER_OTLP_*`` variables). ``"none"`` returns None and
the controllers skip span creation entirely.
"""

from __future__ import annotations

from typing import Any


def setup_tracing(exporter: str = "none", service_name: str = "kaiwo-ctrl") -> Any:
    if exporter in ("", "none", None):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "console":
        span_exporter: Any = ConsoleSpanExporter()
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:  # pragma: no cover - optional dependency
            raise SystemExit("--tracing=otlp needs: pip install opentelemetry-exporter-otlp-proto-http") from e
        span_exporter = OTLPSpanExporter()
    else:
        raise SystemExit(f"unknown tracing exporter {exporter!r} (none, console, otlp)")
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider.get_tracer("kaiwo_ctrl")
