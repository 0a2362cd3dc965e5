package server

import (
	"context"
	"net"
	"net/http"
	"time"
)

// stoppingKey is the request-context key of a context that ends when the
// HTTP server that received the request begins to shut down.
type stoppingKey struct{}

// NewHTTPServer returns the http.Server to serve h (New's handler) with:
// request headers must arrive within 10 seconds, and long polls (?wait=)
// end as soon as Shutdown begins. Such a poll answers as if its wait had
// run out: the call's Result (200) if it has one by then, else the
// waiting call (202), which the agent asks for again, from another
// replica or after the restart. So Shutdown never waits out a poll of up
// to MaxWait, and a submission with ?wait= still tells the agent its call
// ID. Other requests in flight (a decision, a submission) finish as
// usual.
func NewHTTPServer(h http.Handler) *http.Server {
	stopping, stop := context.WithCancel(context.Background())
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), stoppingKey{}, stopping)
		},
	}
	// Shutdown runs this after it has closed the listeners.
	hs.RegisterOnShutdown(stop)
	return hs
}

// waitContext is the context of a long poll of at most wait on behalf of
// the request whose context is ctx: it also ends when the server that
// received the request begins to shut down (NewHTTPServer).
func waitContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	stopping, ok := ctx.Value(stoppingKey{}).(context.Context)
	if !ok {
		return wctx, cancel
	}
	unwatch := context.AfterFunc(stopping, cancel)
	return wctx, func() {
		unwatch()
		cancel()
	}
}
