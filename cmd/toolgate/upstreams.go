package main

import (
	"context"

	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/tool"
)

// upstreams are the worker's MCP servers (--mcp), or none.
type upstreams struct {
	*mcpgate.Upstreams // nil without --mcp
}

// Pin offers the tools whose definitions are pinned (after the worker
// started: the pins are a workflow).
func (u upstreams) Pin(ctx context.Context) {
	if u.Upstreams != nil {
		u.Upstreams.Pin(ctx)
	}
}

// Close disconnects the servers.
func (u upstreams) Close() {
	if u.Upstreams != nil {
		u.Upstreams.Close()
	}
}

// startUpstreams connects to the MCP servers of --mcp and registers their
// tools, held until Pin.
func (a *app) startUpstreams(ctx context.Context, f workerFlags, tools *tool.Registry, pins mcpgate.Pins) (upstreams, error) {
	if f.mcpFile == "" {
		if len(f.trustNewTools) > 0 {
			return upstreams{}, usageError("--trust-new-tools names MCP servers, and there is no --mcp file")
		}
		return upstreams{}, nil
	}
	cfg, err := mcpgate.LoadUpstreams(f.mcpFile, nil)
	if err != nil {
		return upstreams{}, usageError("%v", err)
	}
	ups, err := mcpgate.StartUpstreams(ctx, cfg, mcpgate.UpstreamOptions{Logger: a.logger.Named("mcp"), TrustNewTools: f.trustNewTools,
		Unsandboxed: f.unsandboxed, Own: f.own})
	if err != nil {
		return upstreams{}, err
	}
	if err := ups.Register(tools, pins); err != nil {
		ups.Close()
		return upstreams{}, err
	}
	a.logger.Info("MCP servers connected", zap.String("file", f.mcpFile), zap.Int("servers", len(cfg.Servers)))
	return upstreams{ups}, nil
}

// upstreamWorker closes the MCP servers and the shell tool's sandboxes
// once the worker has stopped, so the tools still running when it stops
// may finish.
type upstreamWorker struct {
	sdkworker.Worker
	closeUpstreams func()
}

func withUpstreams(w sdkworker.Worker, closeFn func()) sdkworker.Worker {
	return &upstreamWorker{Worker: w, closeUpstreams: closeFn}
}

// Stop stops the worker, then the MCP servers and sandboxes.
func (w *upstreamWorker) Stop() {
	w.Worker.Stop()
	w.closeUpstreams()
}
