// The retrieval service of the collector-tier end-to-end test (tests/e2e/test_collector_tier.py).
//
// A Node HTTP service traced by Node's own OpenTelemetry SDK: @opentelemetry/sdk-node with
// the HTTP instrumentation (a SERVER span per request, its parent taken from the caller's W3C
// `traceparent` header) and the OTLP/HTTP protobuf trace exporter, configured by the standard
// OTEL_* environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...).
//
//   GET /retrieve   one `retrieve documents` span, child of the request's SERVER span. Its
//                   start and end come from the request, so the caller (the test) decides
//                   which traces break the retrieval budget, not the machine's speed:
//                     x-retrieval-start-unix-nano  the span's start, ns since the epoch
//                     x-retrieval-duration-ms      its duration in ms
//                   Answers 200 {"documents": [...]}; 400 {"error": ...} on a bad header.
//   GET /health     200 "ok" (not traced): the test's readiness probe.
//
// Listens on 127.0.0.1:$RETRIEVAL_SERVICE_PORT (default: a free port) and prints one JSON line
// {"event": "listening", "port": N} on stdout. SIGTERM flushes the exporter and exits 0.
'use strict';

const { NodeSDK, core, tracing } = require('@opentelemetry/sdk-node');
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');

const sdk = new NodeSDK({
  serviceName: process.env.OTEL_SERVICE_NAME || 'retrieval-service',
  // Each span is exported when it ends, so the test's traces are complete at the Collector
  // as soon as the response has been sent.
  spanProcessors: [new tracing.SimpleSpanProcessor(new OTLPTraceExporter())],
  textMapPropagator: new core.W3CTraceContextPropagator(),
  instrumentations: [
    new HttpInstrumentation({ ignoreIncomingRequestHook: (request) => request.url === '/health' }),
  ],
});
sdk.start();

// Required after sdk.start(), so that the HTTP instrumentation has patched the module.
const http = require('node:http');
const { trace } = require('@opentelemetry/api');

const tracer = trace.getTracer('retrieval-service');
const NS_PER_S = 1_000_000_000n;

/** An OpenTelemetry HrTime ([seconds, nanoseconds]) for `ns` nanoseconds since the epoch. */
function hrTime(ns) {
  return [Number(ns / NS_PER_S), Number(ns % NS_PER_S)];
}

/** The retrieval span's [start, end] in ns from the request's headers; throws on bad input. */
function retrievalInterval(headers) {
  const start = headers['x-retrieval-start-unix-nano'];
  const duration = Number(headers['x-retrieval-duration-ms']);
  if (typeof start !== 'string' || !/^[0-9]{1,20}$/.test(start)) {
    throw new Error('x-retrieval-start-unix-nano must be a whole number of nanoseconds');
  }
  if (!Number.isFinite(duration) || duration < 0 || duration > 3_600_000) {
    throw new Error('x-retrieval-duration-ms must be a number of milliseconds, 0 to 3600000');
  }
  const startNs = BigInt(start);
  return [startNs, startNs + BigInt(Math.round(duration * 1e6))];
}

function answer(response, status, body) {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

const server = http.createServer((request, response) => {
  const path = new URL(request.url, 'http://localhost').pathname;
  if (path === '/health') {
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end('ok');
    return;
  }
  if (path !== '/retrieve' || request.method !== 'GET') {
    answer(response, 404, { error: `no route ${request.method} ${path}` });
    return;
  }
  let interval;
  try {
    interval = retrievalInterval(request.headers);
  } catch (error) {
    answer(response, 400, { error: error.message });
    return;
  }
  const span = tracer.startSpan('retrieve documents', {
    startTime: hrTime(interval[0]),
    attributes: { 'db.system.name': 'qdrant', 'db.operation.name': 'search', 'retrieval.documents': 3 },
  });
  span.end(hrTime(interval[1]));
  answer(response, 200, { documents: ['refund-policy', 'shipping-times', 'order-42'] });
});

server.listen(Number(process.env.RETRIEVAL_SERVICE_PORT || 0), '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ event: 'listening', port: server.address().port }) + '\n');
});

process.on('SIGTERM', () => {
  server.close();
  sdk.shutdown().finally(() => process.exit(0));
});
