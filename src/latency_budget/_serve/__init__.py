"""``latency-budget serve``: judge whole traces from any language in an OTLP tier behind the Collector.

The modules, in the order a span meets them: :mod:`.grpc_receiver` and
:mod:`.http_receiver` (OTLP in, health), :mod:`.intake` (one request's fate),
:mod:`.otlp` (protobuf spans as records and back), :mod:`.assembly` (spans grouped by
trace, bounded), :mod:`.judge` (the in-process accounting, the root annotated),
:mod:`.forwarder` (OTLP out, bounded, retried), :mod:`.reports` (violation logs and
budget metrics) and :mod:`.stats` (counters and the event log); :mod:`.server` wires them.
"""
