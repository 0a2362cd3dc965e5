package tool

import "context"

// Progress is how far a running tool has come, in MCP's terms: Progress
// of Total (0 when the total is not known), and what it is doing.
type Progress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total,omitempty"`
	Message  string  `json:"message,omitempty"`
}

type progressKey struct{}

// ReportProgress tells whoever waits for the call how far the tool has
// come (the worker records it with the tool step's heartbeat; a status
// shows the latest). It does nothing outside a toolgate worker.
func ReportProgress(ctx context.Context, p Progress) {
	if report, ok := ctx.Value(progressKey{}).(func(Progress)); ok {
		report(p)
	}
}

// WithProgress returns ctx with the function ReportProgress calls: the
// worker sets one around each tool.
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}
