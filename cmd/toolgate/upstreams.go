package main

import (
	"context"

	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/tool"
)

// startUpstreams connects to the MCP servers of file (--mcp) and registers
// their tools; closeFn disconnects them. No file: nothing to do.
func (a *app) startUpstreams(ctx context.Context, file string, tools *tool.Registry) (closeFn func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	cfg, err := mcpgate.LoadUpstreams(file, nil)
	if err != nil {
		return nil, usageError("%v", err)
	}
	ups, err := mcpgate.StartUpstreams(ctx, cfg, mcpgate.UpstreamOptions{Logger: a.logger.Named("mcp")})
	if err != nil {
		return nil, err
	}
	n := 0
	for _, t := range ups.Tools() {
		// A schema the registry cannot compile keeps that tool away, not
		// the others.
		if err := tools.Register(t); err != nil {
			a.logger.Warn("MCP tool left out", zap.String("tool", t.Name), zap.Error(err))
			continue
		}
		n++
	}
	a.logger.Info("MCP servers connected", zap.String("file", file), zap.Int("servers", len(cfg.Servers)), zap.Int("tools", n))
	return ups.Close, nil
}

// upstreamWorker closes the MCP servers once the worker has stopped, so
// the tools still running when it stops may finish.
type upstreamWorker struct {
	sdkworker.Worker
	closeUpstreams func()
}

func withUpstreams(w sdkworker.Worker, closeFn func()) sdkworker.Worker {
	return &upstreamWorker{Worker: w, closeUpstreams: closeFn}
}

// Stop stops the worker, then the MCP servers.
func (w *upstreamWorker) Stop() {
	w.Worker.Stop()
	w.closeUpstreams()
}
