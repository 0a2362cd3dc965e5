package bench

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver stands in for an OpenTelemetry collector on this machine:
// it answers 200 to every OTLP/HTTP export and discards it, counting
// requests and bytes. While keeping, it also keeps the trace exports, so
// a check can read what went out.
type otlpReceiver struct {
	srv                         *httptest.Server
	traceRequests, traceBytes   atomic.Int64
	metricRequests, metricBytes atomic.Int64
	mu                          sync.Mutex
	keeping                     bool
	kept                        []keptExport
}

// keptExport is one trace export's body as it came, with its encoding.
type keptExport struct {
	body     []byte
	encoding string
}

func newOTLPReceiver() *otlpReceiver {
	r := &otlpReceiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.traceRequests.Add(1)
		r.traceBytes.Add(int64(len(body)))
		r.mu.Lock()
		if r.keeping {
			r.kept = append(r.kept, keptExport{body: body, encoding: req.Header.Get("Content-Encoding")})
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		n, err := io.Copy(io.Discard, req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.metricRequests.Add(1)
		r.metricBytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	r.srv = httptest.NewServer(mux)
	return r
}

// URL is the receiver's base URL, an OTLP endpoint.
func (r *otlpReceiver) URL() string { return r.srv.URL }

func (r *otlpReceiver) Close() { r.srv.Close() }

// keep starts or stops keeping trace exports; stopping drops what was
// kept.
func (r *otlpReceiver) keep(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keeping, r.kept = on, nil
}

// receivedSpan is one span the receiver was sent, with its tracer's name.
type receivedSpan struct {
	scope string
	span  *tracepb.Span
}

// keptSpans decodes the kept trace exports.
func (r *otlpReceiver) keptSpans() ([]receivedSpan, error) {
	r.mu.Lock()
	kept := r.kept
	r.mu.Unlock()
	var spans []receivedSpan
	for _, k := range kept {
		body := k.body
		if k.encoding == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				return nil, fmt.Errorf("OTLP trace export: %w", err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				return nil, fmt.Errorf("OTLP trace export: %w", err)
			}
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("OTLP trace export: %w", err)
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					spans = append(spans, receivedSpan{scope: ss.GetScope().GetName(), span: s})
				}
			}
		}
	}
	return spans, nil
}
