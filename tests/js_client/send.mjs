// Export the spans of a plan through one of the OpenTelemetry JS SDK's OTLP trace exporters:
//   node send.mjs TRANSPORT COMPRESSION ENDPOINT PLAN.json
// TRANSPORT: http-json | http-proto | grpc; COMPRESSION: gzip | none.
// PLAN: a list of traces, each a list of spans {name, attributes, parent}, parent being the
// index of an earlier span of the same trace (null for the trace's root). Exits 1 when an
// export failed.
import { readFileSync } from 'node:fs';
import { context, trace } from '@opentelemetry/api';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { OTLPTraceExporter as GrpcExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';

const [transport, compression, endpoint, planPath] = process.argv.slice(2);
const Exporter = { grpc: GrpcExporter, 'http-json': JsonExporter, 'http-proto': ProtoExporter }[transport];
const inner = new Exporter({ url: endpoint, compression });
let failed = 0;
const exporter = {  // the SDK's exporter, each result counted
  export(spans, done) {
    inner.export(spans, (result) => { if (result.code !== 0) failed += 1; done(result); });
  },
  shutdown: () => inner.shutdown(),
  forceFlush: () => inner.forceFlush(),
};
// The batch processor, as deployments run it: one export in flight at a time, in small batches
// so that a trial's spans still arrive in several requests. (With the simple processor every
// span is an export of its own, all at once; beyond its fair share the receiver answers
// RESOURCE_EXHAUSTED with RetryInfo, and this SDK's gRPC exporter does not retry it.)
const batches = new BatchSpanProcessor({ exporter, maxExportBatchSize: 7, scheduledDelayMillis: 5 });
const provider = new TracerProvider({ spanProcessors: [batches] });
const tracer = provider.getTracer('verdictgate-js-client-test');
const plan = JSON.parse(readFileSync(planPath, 'utf8'));
for (const spans of plan) {
  const made = [];
  for (const planned of spans) {
    const parent = planned.parent === null
      ? context.active()
      : trace.setSpan(context.active(), made[planned.parent]);
    made.push(tracer.startSpan(planned.name, { attributes: planned.attributes }, parent));
  }
  for (const span of made.reverse()) span.end();  // children first, as a real call ends
}
await provider.forceFlush();
await provider.shutdown();
process.exit(failed ? 1 : 0);
