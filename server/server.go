// Package server is toolgate's HTTP listener: health and readiness now;
// the approver API and web inbox mount here.
package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// New returns the HTTP handler. tc is used to check that Temporal is
// reachable.
func New(tc client.Client, logger *zap.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			logger.Warn("Temporal not reachable", zap.Error(err))
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "temporal is not reachable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
