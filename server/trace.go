package server

import (
	"net/http"

	"github.com/toolgate/toolgate/traceparent"
)

// withCallerTrace hands a request's W3C traceparent (the API's, the HTTP
// hooks', /mcp's) to its context, where the Temporal client's tracing
// interceptor finds it and puts it in the call's start header: the call's
// spans then sit in the caller's trace. A request without one costs a
// header lookup.
func withCallerTrace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(traceparent.Field) != "" {
			r = r.WithContext(traceparent.FromHeader(r.Context(), r.Header))
		}
		next.ServeHTTP(w, r)
	})
}
