"""A small OTLP/HTTP trace receiver for Concierge's tracing tests: accepts POST /v1/traces
(protobuf), decodes each ExportTraceServiceRequest with the `opentelemetry-proto` package from
PyPI, and keeps the spans for the test to read.

    python receiver.py

Prints "ready PORT" and serves on 127.0.0.1 (a free port the system chooses) until killed.
  POST /v1/traces    an export; answered 200 with an empty ExportTraceServiceResponse
  GET  /spans        every span received so far, as JSON (ids in hex, attributes as values)
  GET  /exports      how many exports arrived
  GET  /reset        forgets what arrived
Test traffic stays on loopback.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

LOCK = threading.Lock()
SPANS = []
EXPORTS = [0]


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def decode(body):
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                               "attributes": attributes(link.attributes)} for link in span.links],
                    "status": {"code": span.status.code, "message": span.status.message},
                    "resource": resource,
                })
    return spans


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            self.reply(404, b"", "text/plain")
            return
        try:
            spans = decode(body)
        except Exception as error:  # a body that is not an export: the test sees it as none
            self.reply(400, str(error).encode(), "text/plain")
            return
        with LOCK:
            SPANS.extend(spans)
            EXPORTS[0] += 1
        self.reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        with LOCK:
            if self.path == "/spans":
                body = json.dumps(SPANS).encode()
            elif self.path == "/exports":
                body = json.dumps({"exports": EXPORTS[0]}).encode()
            elif self.path == "/reset":
                SPANS.clear()
                EXPORTS[0] = 0
                body = b"{}"
            else:
                self.reply(404, b"", "text/plain")
                return
        self.reply(200, body, "application/json")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("ready %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
