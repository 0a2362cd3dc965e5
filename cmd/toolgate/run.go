package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/builtin"
	"github.com/toolgate/toolgate/devserver"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/mcpgate"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/registry"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/rules"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/tool"
	"github.com/toolgate/toolgate/websession"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/workflows"
)

func (a *app) devCommand() *cobra.Command {
	var (
		dataDir, httpAddr, tokensFile string
		uiAddr                        string
		port                          int
		wf                            workerFlags
		lf                            ledgerFlags
		sf                            signInFlags
		sess                          sessionFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an embedded Temporal server, a worker and the HTTP listener in one process",
		Long: `Run everything toolgate needs on one machine, with nothing installed:
an embedded Temporal server (state in a SQLite file under --data-dir, so it
survives restarts and kill -9), a worker with the built-in tools and the
default policy (or --policy FILE), and the HTTP listener: API, web inbox,
/metrics. The Temporal gRPC port accepts the stock 'temporal' CLI. With
toolgate-ui installed beside toolgate (go install ./cmd/...), the Temporal
Web UI runs at --ui, read-only, decoding payloads through toolgate's codec
endpoint for people signed in to the inbox. Slack, email and webhooks are
used when their settings are in the environment (SLACK_*, SMTP_*,
TOOLGATE_*; see docs/channels.md).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dataDir, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			if err := a.devDataDir(dataDir); err != nil {
				return err
			}
			// Bound first: a taken address fails before Temporal starts,
			// and the embedded server's own free ports never take it.
			var httpListener net.Listener
			if httpAddr != "" {
				if httpListener, err = listen(httpAddr); err != nil {
					return err
				}
				defer httpListener.Close()
			}
			srv, err := devserver.Start(ctx, devserver.Options{
				DataDir:          dataDir,
				Port:             port,
				Namespace:        "default",
				SearchAttributes: workflows.SearchAttributeTypes(),
				Logger:           a.serverLogger(),
				ServerTraces:     a.conn.otel.serverTraces,
			})
			if err != nil {
				return fmt.Errorf("start embedded Temporal: %w", err)
			}
			defer func() { _ = srv.Stop() }()
			a.conn.address, a.conn.namespace, a.conn.taskQueue = srv.FrontendAddress(), srv.Namespace(), workflows.TaskQueue
			keysNote, err := a.conn.keys.devDefault(dataDir)
			if err != nil {
				return err
			}
			doors, doorsNote, err := devDoors(dataDir, &a.conn.door, &wf.doors)
			if err != nil {
				return err
			}
			wf.trusted = doors
			tokenNote, madeTokens, err := a.devTokens(dataDir, tokensFile)
			if err != nil {
				return err
			}
			if wf.workspace == "" {
				wf.workspace = filepath.Join(dataDir, "workspace")
			}
			lf.devDefaults(dataDir)
			ledgerNote := "  ledger     off\n"
			if lf.dsn != ledgerOff {
				ledgerNote = fmt.Sprintf("  ledger     %s  (toolgate audit show CALL_ID, toolgate audit verify)\n", lf.dsn)
			}
			ledgerNote += devPasskeysNote(lf, sf.publicURL, httpListener)
			ui, err := a.planWebUI(uiAddr, cmd.Flags().Changed("ui"), httpAddr)
			if err != nil {
				return err
			}
			defer ui.stop()
			return a.runProcesses(ctx, processes{worker: &wf, ledger: &lf, signIn: &sf, sessions: &sess, dev: true, madeTokens: madeTokens, own: []string{tokensFile}, hookStateDir: filepath.Join(dataDir, "http-hooks"),
				httpAddr: httpAddr, httpListener: httpListener, dataDir: dataDir, started: func(tools []string, ws, httpURL string) {
					ui.start(ctx, a.logger, srv.FrontendAddress(), httpURL, srv.Namespace())
					fmt.Fprintf(a.stdout, `toolgate dev is running
  Temporal   %s  namespace %s  data %s
  worker     task queue %s; tools: %s
  workspace  %s
  tools      %s
  HTTP       %s  (API under /v1, inbox at /)
%s%s%s%s%sTry in another terminal:
  toolgate call --session demo echo '{"hello":"world"}'
Stop with Ctrl-C.
`, srv.FrontendAddress(), srv.Namespace(), filepath.Join(dataDir, "temporal.db"), workflows.TaskQueue, strings.Join(tools, ", "), ws, toolsWords(wf.unsandboxed), httpURL, ui.banner(), keysNote, doorsNote, ledgerNote, tokenNote)
				}})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".toolgate", "directory for the Temporal database and the default workspace")
	f.IntVar(&port, "temporal-port", 7233, "Temporal gRPC port on 127.0.0.1 (0 picks a free one)")
	f.StringVar(&httpAddr, "http", envOr("TOOLGATE_HTTP", "127.0.0.1:7700"), "HTTP listen address, empty disables it (env TOOLGATE_HTTP)")
	f.StringVar(&uiAddr, "ui", envOr("TOOLGATE_UI", defaultUIAddr), "serve the Temporal Web UI at this address when toolgate-ui is installed beside toolgate (another free port when the default is taken); off disables (env TOOLGATE_UI)")
	wf.add(cmd, "")
	lf.add(cmd, true)
	sf.add(cmd)
	sess.add(cmd)
	a.conn.keys.add(cmd, true)
	a.addCodecFlags(cmd)
	f.StringVar(&tokensFile, "tokens", os.Getenv("TOOLGATE_TOKENS_FILE"), "API tokens file (default: generate an agent and an approver token in <data-dir>/tokens.json)")
	a.conn.otel.add(cmd)
	f.BoolVar(&a.conn.otel.serverTraces, "otel-temporal-server", false, "let the embedded Temporal server export its own spans with the OTEL_* variables (OTEL_TRACES_EXPORTER=otlp): tens of MB a minute; off, it never reads them")
	return cmd
}

// devTokens loads the tokens file, or the dev tokens (created on first
// start), and says how to use them.
// The tokens it makes are returned, for the ledger's token.created.
func (a *app) devTokens(dataDir, tokensFile string) (string, []server.TokenEntry, error) {
	if tokensFile != "" {
		t, err := server.LoadTokens(tokensFile)
		a.tokens = t
		return fmt.Sprintf("  tokens     from %s\n", tokensFile), nil, err
	}
	dt, t, created, err := server.LoadOrCreateDevTokens(dataDir)
	if err != nil {
		return "", nil, err
	}
	a.tokens = t
	path := filepath.Join(dataDir, "tokens.json")
	if !created {
		return fmt.Sprintf("  tokens     in %s (agent and approver)\n", path), nil, nil
	}
	made := []server.TokenEntry{
		{Name: server.DevAgentName, Role: server.RoleAgent, SHA256: server.HashToken(dt.Agent)},
		{Name: server.DevApproverName, Role: server.RoleApprover, SHA256: server.HashToken(dt.Approver)},
	}
	return fmt.Sprintf("  tokens     created in %s:\n    agent     %s  (run by %s: decides at the agent where a rule says user: true)\n    approver  %s  (sign in to the inbox with it)\n",
		path, dt.Agent, server.DevUserName, dt.Approver), made, nil
}

func (a *app) workerCommand() *cobra.Command {
	var (
		wf          workerFlags
		lf          ledgerFlags
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a toolgate worker against an existing Temporal cluster",
		Long: `Run the worker: it runs toolgate's workflows, the policy and the tools.
Start as many as the load needs on one task queue; they share the calls.
On SIGTERM it stops polling and lets running tools finish (--shutdown-timeout).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A worker holds no door key: the tools it runs could sign
			// with it.
			a.conn.door.loaded = true
			if err := lf.check(); err != nil {
				return err
			}
			if _, err := a.conn.keys.load(a.logger); err != nil {
				return err
			}
			var err error
			if wf.trusted, err = wf.doors.load(); err != nil {
				return err
			}
			return a.runProcesses(cmd.Context(), processes{worker: &wf, ledger: &lf, metricsAddr: metricsAddr, started: func(tools []string, ws, _ string) {
				a.logger.Info("Worker running", zap.String("temporal", a.conn.address), zap.String("namespace", a.conn.namespace),
					zap.String("taskQueue", a.conn.taskQueue), zap.Strings("tools", tools), zap.String("workspace", ws))
			}})
		},
	}
	a.conn.addFlags(cmd)
	_ = cmd.Flags().MarkHidden("door-key") // read by no worker
	wf.add(cmd, "workspace")
	lf.add(cmd, false)
	cmd.Flags().StringVar(&wf.publicURL, "public-url", os.Getenv("TOOLGATE_PUBLIC_URL"), "the https URL people open toolgate's inbox at (serve's --public-url); its host is the passkeys' relying party, which a policy rule with passkey: true needs (env TOOLGATE_PUBLIC_URL)")
	cmd.Flags().StringVar(&metricsAddr, "metrics", envOr("TOOLGATE_METRICS", "127.0.0.1:9090"), "serve Prometheus metrics at http://ADDR/metrics; empty disables (env TOOLGATE_METRICS)")
	a.conn.otel.add(cmd)
	return cmd
}

func (a *app) serveCommand() *cobra.Command {
	var (
		httpAddr, tokensFile, hookStateDir string
		lf                                 ledgerFlags
		sf                                 signInFlags
		sess                               sessionFlags
	)
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
			if _, err := a.conn.keys.load(a.logger); err != nil {
				return err // the keyring first: nothing runs without it
			}
			// serve is a door: it signs for whom it authenticated.
			if door, err := a.conn.door.load(); err != nil {
				return err
			} else if door == nil {
				return usageError("serve needs its door key: --door-key FILE or TOOLGATE_DOOR_KEY (make one with 'toolgate doors new NAME --key FILE --doors DOORS_FILE' and give the workers DOORS_FILE; docs/production.md, \"Door keys\")")
			}
			return a.runProcesses(cmd.Context(), processes{httpAddr: httpAddr, own: []string{tokensFile}, ledger: &lf, signIn: &sf, sessions: &sess, hookStateDir: hookStateDir, started: func(_ []string, _, httpURL string) {
				a.logger.Info("HTTP listener running", zap.String("url", httpURL), zap.String("temporal", a.conn.address))
			}})
		},
	}
	a.conn.addFlags(cmd)
	cmd.Flags().StringVar(&httpAddr, "http", envOr("TOOLGATE_HTTP", "127.0.0.1:7700"), "HTTP listen address (env TOOLGATE_HTTP)")
	cmd.Flags().StringVar(&tokensFile, "tokens", os.Getenv("TOOLGATE_TOKENS_FILE"), "API tokens file (env TOOLGATE_TOKENS_FILE)")
	cmd.Flags().StringVar(&hookStateDir, "hook-state-dir", os.Getenv("TOOLGATE_HOOK_STATE_DIR"), "where Claude Code's HTTP hooks (POST /hooks/claude-code) keep their per-session state (env TOOLGATE_HOOK_STATE_DIR; default $XDG_STATE_HOME/toolgate/hooks/http)")
	lf.add(cmd, false)
	sf.add(cmd)
	sess.add(cmd)
	a.addCodecFlags(cmd)
	a.conn.otel.add(cmd)
	return cmd
}

// processes says what runProcesses runs.
type processes struct {
	worker *workerFlags // nil: no worker
	// httpAddr serves health, the API, the inbox and /metrics; empty: none.
	httpAddr string
	// httpListener, when set, is httpAddr already bound (toolgate dev binds
	// it before its embedded server picks its own ports).
	httpListener net.Listener
	// metricsAddr serves /metrics alone (for a worker without httpAddr).
	metricsAddr string
	// dataDir keeps a generated email-link secret (toolgate dev); empty
	// makes TOOLGATE_LINK_SECRET required when email is on.
	dataDir string
	// ledger says where the decision ledger is; dev makes its signing key
	// on first start, and logs the tokens it made (madeTokens).
	ledger *ledgerFlags
	// signIn configures sign-in through the company's identity provider.
	signIn *signInFlags
	// sessions says where the inbox keeps its sign-ins (with httpAddr);
	// nil: in memory.
	sessions *sessionFlags
	// hookStateDir keeps the HTTP hooks' per-session state; empty: the
	// server's default.
	hookStateDir string
	dev          bool
	madeTokens   []server.TokenEntry
	// own are toolgate's files this process was given beyond its flags
	// (the tokens file); see ownFiles.
	own []string
	// started reports what runs, once everything does.
	started func(tools []string, workspace, httpURL string)
}

// runProcesses connects to Temporal, starts the worker and the listeners,
// reports through p.started, and runs until ctx ends; then it stops them
// in reverse order: listeners first, then the worker, which lets running
// activities finish (up to --shutdown-timeout) before it stops polling.
func (a *app) runProcesses(ctx context.Context, p processes) error {
	if p.ledger != nil {
		if err := p.ledger.check(); err != nil {
			return err
		}
	}
	var signIn *server.SignIn
	if p.httpAddr != "" && p.signIn != nil {
		devHTTP := ""
		if p.dev {
			devHTTP = p.httpAddr
		}
		var err error
		if signIn, err = p.signIn.build(ctx, devHTTP); err != nil {
			return err
		}
		if signIn != nil && p.signIn.trustUnverifiedEmail {
			a.logger.Warn("Sign-in takes an email without email_verified as verified (--oidc-trust-unverified-email): anyone who can set their email at the provider may sign in under another's address")
		}
	}
	notifications, err := notify.FromEnv(os.Getenv, p.dataDir)
	if err != nil {
		return usageError("notification settings: %v", err)
	}
	stopOtel, err := a.conn.otel.start(ctx, a.logger.Named("otel"))
	if err != nil {
		return err
	}
	defer stopOtel() // after the worker and the listeners: their last spans go out
	m := metrics.NewWithMeter(a.conn.otel.tel.Meter(), func(err error) { a.logger.Debug("OpenTelemetry metric", zap.Error(err)) })
	defer m.Close()
	a.metrics = m.Handler
	tc, err := a.conn.dial(a.logger, m.Handler)
	if err != nil {
		return err
	}
	defer tc.Close()

	var tools []string
	workspace := ""
	var channels []activities.Channel
	// A worker notifies through them; a ledger's signer (serve too)
	// publishes its checkpoints to the webhook.
	if p.worker != nil || p.ledger != nil {
		if channels, err = notifications.Channels(a.logger.Named("notify")); err != nil {
			return usageError("notification settings: %v", err)
		}
	}
	var lg *ledger.Ledger
	if p.ledger != nil {
		if lg, err = a.openLedger(ctx, *p.ledger, p.dev, webhookOf(channels)); err != nil {
			return err
		}
	}
	if lg != nil {
		defer lg.Close()
		if err := a.logTokensCreated(ctx, lg, p.madeTokens); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		// Whoever holds the signing key signs checkpoints while entries
		// arrive: toolgate serve in a deployment, never a worker beside
		// the tools it runs.
		go lg.Run(ctx)
		if p.worker != nil && !p.dev && lg.Signs() {
			a.logger.Warn("This worker holds the ledger's signing key, beside the tools it runs: give workers its verifier key ('toolgate audit key --ledger-key FILE') and the signing key to toolgate serve (docs/production.md, \"Worker placement\")")
		}
	}
	passkeys, rp, err := a.openPasskeys(ctx, p, lg)
	if err != nil {
		return err
	}
	if passkeys != nil {
		defer passkeys.Close()
	}
	if p.worker != nil {
		p.worker.own = a.ownFiles(p)
		p.worker.passkeys, p.worker.passkeyRP = passkeys, rp
		w, names, ws, err := a.startWorker(ctx, tc, *p.worker, channels, lg)
		if err != nil {
			return err
		}
		defer w.Stop()
		tools, workspace = names, ws
	}

	httpURL := ""
	if p.httpAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.HTTP)
		calls := a.calls(tc)
		if p.worker != nil {
			// The worker polls this process's task queue on the same
			// client: a new call's first task goes to it directly.
			calls = calls.WithEagerStart()
		}
		gateway := mcpgate.NewGateway(calls, mcpgate.Options{Logger: a.logger.Named("mcp")})
		var sessions websession.Store
		if p.sessions != nil {
			ledgerDSN := ledgerOff
			if p.ledger != nil {
				ledgerDSN = p.ledger.dsn
			}
			if sessions, err = a.openSessions(ctx, *p.sessions, ledgerDSN); err != nil {
				return err
			}
			if sessions != nil {
				defer sessions.Close()
			}
		}
		cfg := server.Config{Calls: calls, Tokens: a.tokens, Sessions: sessions, Passkeys: passkeys, PasskeyRP: rp,
			Logger: a.logger.Named("http"), Notify: notifications, MCP: gateway.HTTPHandler(a.tokens.Agent),
			Ready:  func(ctx context.Context) error { return worker.SearchAttributesUsable(ctx, tc, a.conn.namespace) },
			Ledger: lg, Namespace: a.conn.namespace, CodecCORSOrigins: a.codecOrigins, CodecRate: a.codecRate, SignIn: signIn, HookStateDir: p.hookStateDir}
		if p.worker != nil {
			cfg.Tools = toolsWords(p.worker.unsandboxed)
		}
		if ring := a.conn.keys.ring; ring != nil {
			cfg.Codec = ring.EndpointCodec()
		}
		h := server.New(cfg)
		// Deferred before the listener's stop, so it runs after it: the
		// codec's decode counts of the current minute go to the ledger
		// (still open: it closes later) once no request is left.
		defer h.Close()
		mux.Handle("/", h)
		ln := p.httpListener
		if ln == nil {
			if ln, err = listen(p.httpAddr); err != nil {
				return err
			}
		}
		url, stop := a.serveHTTP(ln, mux)
		defer stop()
		httpURL = url
	}
	if p.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.HTTP)
		// Metrics are not worth refusing to work for: a second worker on the
		// same host with the default address runs without them.
		if ln, err := listen(p.metricsAddr); err != nil {
			a.logger.Error("No metrics: the listener did not start; set --metrics to a free address", zap.Error(err))
		} else {
			url, stop := a.serveHTTP(ln, mux)
			defer stop()
			a.logger.Info("Metrics", zap.String("url", url+"/metrics"))
		}
	}

	p.started(tools, workspace, httpURL)
	<-ctx.Done()
	a.logger.Info("Stopping")
	return nil
}

// listen binds an HTTP listener's address.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP listener: %w", err)
	}
	return ln, nil
}

// serveHTTP serves h on ln until stop is called.
func (a *app) serveHTTP(ln net.Listener, h http.Handler) (url string, stop func()) {
	hs := server.NewHTTPServer(h) // long polls end when stop begins
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error("HTTP listener stopped", zap.Error(err))
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
}

// workerFlags tune a worker.
type workerFlags struct {
	workspace        string
	policyFile       string
	pollers          int
	maxActivities    int
	maxWorkflowTasks int
	cacheSize        int
	shutdownTimeout  time.Duration
	mcpFile          string
	trustNewTools    []string
	// doors names the doors file; trusted is what it trusts, once read
	// (dev sets it).
	doors   trustedDoors
	trusted *statement.Doors
	// unsandboxed: --unsandboxed-tools.
	unsandboxed bool
	// publicURL is where people open the inbox (toolgate worker's
	// --public-url): its host is the passkeys' relying party. passkeys
	// and passkeyRP are the registry and relying party the process
	// opened; nil: passkey approvals are refused.
	publicURL string
	passkeys  *registry.Registry
	passkeyRP passkey.RelyingParty
	// own are toolgate's own files (ownFiles): no sandbox grant may reach
	// them.
	own []string
}

func (f *workerFlags) add(cmd *cobra.Command, workspaceDefault string) {
	fs := cmd.Flags()
	fs.StringVar(&f.workspace, "workspace", envOr("TOOLGATE_WORKSPACE", workspaceDefault), "directory the built-in tools are confined to (env TOOLGATE_WORKSPACE)")
	fs.StringVar(&f.policyFile, "policy", os.Getenv("TOOLGATE_POLICY"), "policy file (YAML rules; reloaded when it changes); default: the built-in policy (env TOOLGATE_POLICY)")
	fs.IntVar(&f.pollers, "pollers", 2, "pollers for workflow tasks and for activity tasks, each")
	fs.IntVar(&f.maxActivities, "max-concurrent-activities", 200, "tools running at once in this worker")
	fs.IntVar(&f.maxWorkflowTasks, "max-concurrent-workflow-tasks", 200, "workflow tasks processed at once")
	fs.IntVar(&f.cacheSize, "cache-size", 10000, "workflows kept in memory between tasks (sticky cache); memory grows up to this")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long running tools may finish before the worker stops")
	fs.StringVar(&f.mcpFile, "mcp", os.Getenv("TOOLGATE_MCP"), "upstream MCP servers file (the mcpServers of .mcp.json); their tools run as <server>__<tool> (env TOOLGATE_MCP)")
	fs.StringSliceVar(&f.trustNewTools, "trust-new-tools", nil, "MCP servers (by name) whose new tools are offered without asking an approver; changed tools are still asked")
	fs.BoolVar(&f.unsandboxed, "unsandboxed-tools", os.Getenv("TOOLGATE_UNSANDBOXED_TOOLS") == "1", "run the shell tool's commands and the MCP stdio servers (--mcp) without the Landlock sandbox: they reach everything this process's user reaches, toolgate's keys included (env TOOLGATE_UNSANDBOXED_TOOLS=1); without it, a kernel with no Landlock runs no command and starts no MCP stdio server")
	f.doors.add(cmd, workspaceDefault == "")
}

// startWorker registers the built-in tools and default policy and starts
// polling.
func (a *app) startWorker(ctx context.Context, tc client.Client, f workerFlags, channels []activities.Channel, lg *ledger.Ledger) (sdkworker.Worker, []string, string, error) {
	ws, err := filepath.Abs(f.workspace)
	if err != nil {
		return nil, nil, "", err
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, nil, "", fmt.Errorf("create workspace: %w", err)
	}
	if err := a.awaitSearchAttributes(ctx, tc); err != nil {
		return nil, nil, "", err
	}
	if f.trusted == nil {
		if f.trusted, err = f.doors.load(); err != nil {
			return nil, nil, "", err
		}
	}
	publicURL := ""
	if f.passkeyRP.ID != "" {
		publicURL = f.passkeyRP.Origins[0]
	}
	pol, middleware, err := a.loadPolicy(ctx, f.policyFile, rules.Options{Workspace: ws, Own: f.own, PublicURL: publicURL}, lg)
	if err != nil {
		return nil, nil, "", err
	}
	// The tools check the policy's protected paths again on the path they
	// actually opened, so a symlink swapped in after evaluation cannot
	// lead them there.
	workspace := builtin.Workspace{Root: ws, Unsandboxed: f.unsandboxed}
	a.logSandbox(f.unsandboxed)
	if r, ok := pol.(*rules.Reloader); ok {
		workspace.Guard = r.CheckPath
	}
	tools := tool.NewRegistry()
	for _, t := range builtin.Tools(workspace) {
		if err := tools.Register(t); err != nil {
			return nil, nil, "", err
		}
	}
	ups, err := a.startUpstreams(ctx, f, tools, a.calls(tc))
	if err != nil {
		return nil, nil, "", err
	}
	closeTools := func() {
		ups.Close()
		builtin.CloseSandboxes()
	}
	sdkworker.SetStickyWorkflowCacheSize(f.cacheSize)
	wo := worker.Options{
		TaskQueue:  a.conn.taskQueue,
		Policy:     pol,
		Middleware: middleware,
		Channels:   channels,
		Tools:      tools,
		// The converter tc was dialled with (dial loaded the keys).
		DataConverter: keyring.DataConverter(a.conn.keys.ring),
		Doors:         f.trusted,
		RelyingParty:  f.passkeyRP,
		Worker: sdkworker.Options{
			MaxConcurrentActivityTaskPollers:       f.pollers,
			MaxConcurrentWorkflowTaskPollers:       f.pollers,
			MaxConcurrentActivityExecutionSize:     f.maxActivities,
			MaxConcurrentWorkflowTaskExecutionSize: f.maxWorkflowTasks,
			WorkerStopTimeout:                      f.shutdownTimeout,
		},
	}
	if lg != nil {
		wo.Ledger = lg
	}
	if f.passkeys != nil {
		wo.Passkeys = workerPasskeys{f.passkeys}
	}
	wo.Tracing = a.conn.otel.tracing()
	w, err := worker.New(tc, wo)
	if err != nil {
		closeTools()
		return nil, nil, "", err
	}
	if err := w.Start(); err != nil {
		closeTools()
		return nil, nil, "", fmt.Errorf("start worker: %w", err)
	}
	ups.Pin(ctx)
	names := slices.DeleteFunc(tools.Names(), func(n string) bool { return n == policy.DefinitionChangeTool })
	return withUpstreams(w, closeTools), names, ws, nil
}

// loadPolicy returns the policy file's rules, reloaded while ctx lasts, or
// the built-in policy when no file is given.
// Each version it serves is logged to the ledger (policy.loaded).
func (a *app) loadPolicy(ctx context.Context, file string, opts rules.Options, lg *ledger.Ledger) (policy.ToolPolicy, []policy.OutputMiddleware, error) {
	if file == "" {
		p := builtin.DefaultPolicy(builtin.Workspace{Root: opts.Workspace})
		a.logPolicyLoaded(lg, "", policy.VersionOf(p))
		return p, nil, nil
	}
	r, err := rules.NewReloader(file, opts, a.logger.Named("policy"))
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	a.logPolicyLoaded(lg, file, r.Version())
	r.OnNewVersion(func(v string) { a.logPolicyLoaded(lg, file, v) })
	go r.Run(ctx, rules.DefaultReloadInterval)
	a.logger.Info("Policy loaded", zap.String("file", file), zap.String("version", r.Version()))
	return r, []policy.OutputMiddleware{r}, nil
}

// serverLogger keeps the embedded server quiet unless --log-level debug.
func (a *app) serverLogger() *zap.Logger {
	l := a.logger.Named("temporal-server")
	if a.logLevel != "debug" {
		l = l.WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel))
	}
	return l
}

// awaitSearchAttributes registers toolgate's missing search attributes
// when the worker may, then waits until calls can use them: a workflow
// that upserts an attribute the namespace does not map fails its task
// over and over.
func (a *app) awaitSearchAttributes(ctx context.Context, tc client.Client) error {
	if err := worker.EnsureSearchAttributes(ctx, tc, a.conn.namespace); err != nil {
		a.logger.Warn("Could not register toolgate's search attributes; an administrator must: toolgate namespace setup (docs/production.md)", zap.Error(err))
	}
	checks := 0
	err := worker.AwaitSearchAttributes(ctx, tc, a.conn.namespace, func(err error) {
		if checks%10 == 0 {
			a.logger.Warn("Waiting for toolgate's search attributes before taking calls", zap.String("namespace", a.conn.namespace), zap.Error(err))
		}
		checks++
	})
	if err != nil {
		return fmt.Errorf("namespace %s: toolgate's search attributes: %w", a.conn.namespace, err)
	}
	return nil
}
