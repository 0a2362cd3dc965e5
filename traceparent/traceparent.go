// Package traceparent carries a caller's W3C trace context (the
// traceparent and tracestate fields) between toolgate's edges and a Go
// context: an HTTP request's headers, an MCP request's _meta, a hook's
// TRACEPARENT variable. A context that carries one hands it to the
// Temporal client's tracing interceptor, which puts it in the call's
// start header. It only parses and formats: it exports nothing.
package traceparent

import (
	"context"
	"net/http"
	"os"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Field names: the HTTP headers, the _meta keys and (upper-cased) the
// environment variables.
const (
	Field      = "traceparent"
	StateField = "tracestate"
	EnvField   = "TRACEPARENT"
	EnvState   = "TRACESTATE"
)

var w3c = propagation.TraceContext{}

// Into returns ctx carrying the span context that traceparent (and
// tracestate) name; ctx itself when traceparent is empty or invalid.
func Into(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{Field: traceparent}
	if tracestate != "" {
		carrier[StateField] = tracestate
	}
	out := w3c.Extract(ctx, carrier)
	if !trace.SpanContextFromContext(out).IsValid() {
		return ctx
	}
	return out
}

// FromHeader is Into with an HTTP request's headers.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	return Into(ctx, h.Get(Field), h.Get(StateField))
}

// FromEnv is Into with the TRACEPARENT and TRACESTATE variables, which
// agents set for the commands they run.
func FromEnv(ctx context.Context) context.Context {
	return Into(ctx, os.Getenv(EnvField), os.Getenv(EnvState))
}

// ToHeader sets the traceparent (and tracestate) of the span context ctx
// carries on h; nothing when it carries none.
func ToHeader(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}
