package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/toolgate/toolgate/builtin"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/devserver"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

func (a *app) devCommand() *cobra.Command {
	var (
		dataDir, httpAddr, workspace, tokensFile string
		port                                     int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an embedded Temporal server, a worker and the HTTP listener in one process",
		Long: `Run everything toolgate needs on one machine, with nothing installed:
an embedded Temporal server (state in a SQLite file under --data-dir, so it
survives restarts and kill -9), a worker with the built-in tools and the
default policy, and the HTTP listener. The Temporal gRPC port accepts the
stock 'temporal' CLI and the Temporal Web UI.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dataDir, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("create data dir: %w", err)
			}
			srv, err := devserver.Start(ctx, devserver.Options{
				DataDir:          dataDir,
				Port:             port,
				Namespace:        "default",
				SearchAttributes: workflows.SearchAttributeTypes(),
				Logger:           a.serverLogger(),
			})
			if err != nil {
				return fmt.Errorf("start embedded Temporal: %w", err)
			}
			defer func() { _ = srv.Stop() }()
			a.conn = connection{address: srv.FrontendAddress(), namespace: srv.Namespace(), taskQueue: workflows.TaskQueue}
			tokenNote, err := a.devTokens(dataDir, tokensFile)
			if err != nil {
				return err
			}
			if workspace == "" {
				workspace = filepath.Join(dataDir, "workspace")
			}
			return a.runProcesses(ctx, true, workspace, httpAddr, func(tools []string, ws, httpURL string) {
				fmt.Fprintf(a.stdout, `toolgate dev is running
  Temporal   %s  namespace %s  data %s
  worker     task queue %s; tools: %s
  workspace  %s
  HTTP       %s  (API under /v1, inbox at /)
%sTry in another terminal:
  toolgate call --session demo echo '{"hello":"world"}'
Stop with Ctrl-C.
`, srv.FrontendAddress(), srv.Namespace(), filepath.Join(dataDir, "temporal.db"), workflows.TaskQueue, strings.Join(tools, ", "), ws, httpURL, tokenNote)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".toolgate", "directory for the Temporal database and the default workspace")
	f.IntVar(&port, "temporal-port", 7233, "Temporal gRPC port on 127.0.0.1 (0 picks a free one)")
	f.StringVar(&httpAddr, "http", "127.0.0.1:7700", "HTTP listen address (empty disables it)")
	f.StringVar(&workspace, "workspace", "", "directory the built-in tools are confined to (default <data-dir>/workspace)")
	f.StringVar(&tokensFile, "tokens", os.Getenv("TOOLGATE_TOKENS_FILE"), "API tokens file (default: generate an agent and an approver token in <data-dir>/tokens.json)")
	return cmd
}

// devTokens loads the tokens file, or the dev tokens (created on first
// start), and says how to use them.
func (a *app) devTokens(dataDir, tokensFile string) (string, error) {
	if tokensFile != "" {
		t, err := server.LoadTokens(tokensFile)
		a.tokens = t
		return fmt.Sprintf("  tokens     from %s\n", tokensFile), err
	}
	dt, t, created, err := server.LoadOrCreateDevTokens(dataDir)
	if err != nil {
		return "", err
	}
	a.tokens = t
	path := filepath.Join(dataDir, "tokens.json")
	if !created {
		return fmt.Sprintf("  tokens     in %s (agent and approver)\n", path), nil
	}
	return fmt.Sprintf("  tokens     created in %s:\n    agent     %s\n    approver  %s  (sign in to the inbox with it)\n", path, dt.Agent, dt.Approver), nil
}

func (a *app) workerCommand() *cobra.Command {
	var workspace string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a toolgate worker against an existing Temporal cluster",
		Long: `Run the worker: it runs toolgate's workflows, the policy and the tools.
Start as many as the load needs on one task queue; they share the calls.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runProcesses(cmd.Context(), true, workspace, "", func(tools []string, ws, _ string) {
				a.logger.Info("Worker running", zap.String("temporal", a.conn.address), zap.String("namespace", a.conn.namespace),
					zap.String("taskQueue", a.conn.taskQueue), zap.Strings("tools", tools), zap.String("workspace", ws))
			})
		},
	}
	a.conn.addFlags(cmd)
	cmd.Flags().StringVar(&workspace, "workspace", "workspace", "directory the built-in tools are confined to")
	return cmd
}

func (a *app) serveCommand() *cobra.Command {
	var httpAddr, tokensFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run toolgate's HTTP listener against an existing Temporal cluster",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tokensFile == "" {
				return usageError("serve needs --tokens FILE (or TOOLGATE_TOKENS_FILE): see 'toolgate token new'")
			}
			t, err := server.LoadTokens(tokensFile)
			if err != nil {
				return err
			}
			a.tokens = t
			return a.runProcesses(cmd.Context(), false, "", httpAddr, func(_ []string, _, httpURL string) {
				a.logger.Info("HTTP listener running", zap.String("url", httpURL), zap.String("temporal", a.conn.address))
			})
		},
	}
	a.conn.addFlags(cmd)
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:7700", "HTTP listen address")
	cmd.Flags().StringVar(&tokensFile, "tokens", os.Getenv("TOOLGATE_TOKENS_FILE"), "API tokens file (env TOOLGATE_TOKENS_FILE)")
	return cmd
}

// runProcesses connects to Temporal, starts the worker (withWorker) and the
// HTTP listener (when httpAddr is set), reports through started, and runs
// until ctx ends; then it stops them in reverse order.
func (a *app) runProcesses(ctx context.Context, withWorker bool, workspace, httpAddr string, started func(tools []string, workspace, httpURL string)) error {
	tc, err := a.conn.dial(a.logger)
	if err != nil {
		return err
	}
	defer tc.Close()

	var tools []string
	if withWorker {
		ws, err := filepath.Abs(workspace)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(ws, 0o755); err != nil {
			return fmt.Errorf("create workspace: %w", err)
		}
		workspace = ws
		if err := worker.EnsureSearchAttributes(ctx, tc, a.conn.namespace); err != nil {
			a.logger.Warn("Could not register toolgate's search attributes; an administrator must (see README)", zap.Error(err))
		}
		w, names, err := newWorker(tc, a.conn.taskQueue, builtin.Workspace{Root: ws})
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		defer w.Stop()
		tools = names
	}

	httpURL := ""
	if httpAddr != "" {
		ln, err := net.Listen("tcp", httpAddr)
		if err != nil {
			return fmt.Errorf("HTTP listener: %w", err)
		}
		httpURL = "http://" + ln.Addr().String()
		handler := server.New(server.Config{Calls: tgclient.New(tc, a.conn.taskQueue), Tokens: a.tokens, Logger: a.logger.Named("http")})
		hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.logger.Error("HTTP listener stopped", zap.Error(err))
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
	}

	started(tools, workspace, httpURL)
	<-ctx.Done()
	a.logger.Info("Stopping")
	return nil
}

// newWorker builds the worker with the built-in tools and default policy.
func newWorker(tc client.Client, taskQueue string, ws builtin.Workspace) (sdkworker.Worker, []string, error) {
	tools := tool.NewRegistry()
	for _, t := range builtin.Tools(ws) {
		if err := tools.Register(t); err != nil {
			return nil, nil, err
		}
	}
	w, err := worker.New(tc, worker.Options{TaskQueue: taskQueue, Policy: builtin.DefaultPolicy(ws), Tools: tools})
	if err != nil {
		return nil, nil, err
	}
	return w, tools.Names(), nil
}

// serverLogger keeps the embedded server quiet unless --log-level debug.
func (a *app) serverLogger() *zap.Logger {
	l := a.logger.Named("temporal-server")
	if a.logLevel != "debug" {
		l = l.WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel))
	}
	return l
}
