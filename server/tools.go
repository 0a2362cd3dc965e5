package server

import (
	"context"
	"net/http"
	"time"

	tgclient "github.com/toolgate/toolgate/client"
)

// toolsTimeout bounds GET /v1/tools.
const toolsTimeout = 20 * time.Second

// listTools answers GET /v1/tools[?format=json|openai|anthropic]: the
// tools an agent may ask for (those the policy does not deny outright),
// as {"tools":[...]} in toolgate's shape or in the shape a model API
// takes as is.
func (a *api) listTools(w http.ResponseWriter, r *http.Request, _ Principal) {
	format := r.URL.Query().Get("format")
	// Check the format before asking Temporal: a typo costs nothing.
	if _, err := tgclient.ToolsAs(format, nil); err != nil {
		writeError(w, a.mapError(err))
		return
	}
	// A worker answers in milliseconds; none answering is Temporal's
	// trouble (504), not a request that hangs.
	ctx, cancel := context.WithTimeout(r.Context(), toolsTimeout)
	defer cancel()
	ds, err := a.calls.Tools(ctx)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	tools, err := tgclient.ToolsAs(format, ds)
	if err != nil {
		writeError(w, a.mapError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": tools})
}
