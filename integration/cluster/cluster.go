// Package cluster starts a real Temporal cluster for tests and benchmarks,
// as operators run one, and toolgate on it as docs/production.md says:
//
//   - a throwaway PostgreSQL (Debian's, initdb in a temporary directory, a
//     free port), the schema applied by deploy/temporal/setup-schema.sh with
//     temporal-sql-tool;
//   - the stock Temporal server (go.temporal.io/server/cmd/server at the
//     version go.mod pins, built once and cached) as four processes,
//     frontend, history, matching and worker, on PostgreSQL persistence and
//     SQL visibility with 4 history shards;
//   - the dynamic config of a Mode: Stock (no overrides: visibility is
//     limited to 10 requests/s per frontend) or Documented
//     (deploy/temporal/dynamicconfig.yaml, the file docs/production.md tells
//     operators to use);
//   - `toolgate namespace setup`, then `toolgate worker` processes and one
//     `toolgate serve`, each a process of the built binary talking to the
//     frontend over the network.
//
// Every process can be killed with -9 and started again (Process). Nothing
// is downloaded: the binaries come from the module cache.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/statement"
)

// Mode is the server's dynamic config.
type Mode string

const (
	// Stock runs the server with no dynamic config overrides: the limits
	// a new cluster has (frontend.namespaceRPS.visibility 10, ...).
	Stock Mode = "stock"
	// Documented runs it with deploy/temporal/dynamicconfig.yaml, exactly
	// the settings docs/production.md tells operators to set.
	Documented Mode = "documented"
)

// Options say what to start.
type Options struct {
	// Mode is the dynamic config. Required.
	Mode Mode
	// Toolgate is the path of the built toolgate binary. Required.
	Toolgate string
	// Workers is how many `toolgate worker` processes to start; zero
	// starts none (e.g. for `toolgate bench`, which runs its own).
	Workers int
	// Serve starts one `toolgate serve` with TokensFile.
	Serve      bool
	TokensFile string
	// Namespace toolgate runs in; default "default".
	Namespace string
	// Logf, when set, reports each step and how long it took.
	Logf func(format string, args ...any)
	// Witnesses cosign the ledger's checkpoints: serve, its signer, is
	// given each (--ledger-witness), and each is told the log first.
	Witnesses []*Witness
}

// Cluster is a running cluster. Close stops it and removes its files.
type Cluster struct {
	// Postgres, History, Matching, Frontend and InternalWorker are the
	// database and the four Temporal services.
	Postgres, History, Matching, Frontend, InternalWorker *Process
	// Workers are the `toolgate worker` processes, Serve `toolgate serve`
	// (nil without Options.Serve).
	Workers []*Process
	Serve   *Process

	// FrontendAddress is the frontend's host:port, Namespace the
	// namespace, HTTPAddress serve's listen address (host:port), Workspace
	// the directory every worker's tools share.
	FrontendAddress, Namespace, HTTPAddress, Workspace string
	// HistoryMetrics is the history service's Prometheus endpoint (URL).
	HistoryMetrics string
	// Binaries are the server binaries that run.
	Binaries Binaries
	// Mode is the dynamic config the server runs with.
	Mode Mode
	// LedgerDSN is the decision ledger every worker appends to and serve
	// reads (database toolgate_ledger, which the schema script creates);
	// LedgerKey is the file of its signing key, which serve alone holds
	// (it signs the checkpoints); the workers hold LedgerVerifierKey, as
	// docs/production.md's "Worker placement" says.
	LedgerDSN, LedgerKey, LedgerVerifierKey string
	// Keys is the keyring every toolgate process encrypts its payloads
	// with (TOOLGATE_KEYS in Env).
	Keys string
	// DoorKey is the door key serve and the CLI sign with; Doors the
	// doors file the workers trust (TOOLGATE_DOOR_KEY, TOOLGATE_DOORS in
	// Env: a worker never reads a door key).
	DoorKey, Doors string

	dir         string
	pgPort      int
	witnessArgs []string
	logf        func(string, ...any)
}

// Start builds what is missing and starts the cluster; on failure it
// stops whatever it started.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Mode != Stock && o.Mode != Documented {
		return nil, fmt.Errorf("cluster: mode %q is neither %q nor %q", o.Mode, Stock, Documented)
	}
	if o.Toolgate == "" {
		return nil, errors.New("cluster: Options.Toolgate, the built toolgate binary, is required (it sets up the namespace)")
	}
	if o.Serve && o.TokensFile == "" {
		return nil, errors.New("cluster: serve needs Options.TokensFile")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// Under /tmp rather than a test's directory: as root, PostgreSQL runs
	// as the postgres user, which must reach its data directory.
	dir, err := os.MkdirTemp("", "toolgate-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, logf: logf, Mode: o.Mode, Namespace: o.Namespace, Workspace: filepath.Join(dir, "workspace")}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	step := c.stepTimer()

	moduleDir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	// The server build (cached after the first) overlaps initdb.
	built := make(chan error, 1)
	go func() {
		b, err := Build(ctx, moduleDir)
		c.Binaries = b
		built <- err
	}()
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	membership, err := freeMembershipPorts(4)
	if err != nil {
		return nil, err
	}
	c.pgPort = ports[0]
	c.Postgres, err = newPostgres(dir, ports[0])
	if err == nil {
		err = c.Postgres.Start(ctx)
	}
	if buildErr := <-built; buildErr != nil {
		return nil, fmt.Errorf("cluster: build the Temporal server: %w", buildErr)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	step("PostgreSQL started; Temporal server " + c.Binaries.Version + " built or found in the cache")

	if err := setupSchema(ctx, moduleDir, c.Binaries, ports[0]); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	step("schema applied (deploy/temporal/setup-schema.sh)")
	c.LedgerDSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/toolgate_ledger?sslmode=disable", ports[0])
	c.LedgerKey = filepath.Join(dir, "ledger.key")
	lk, _, err := ledger.LoadOrCreateKey(c.LedgerKey, "cluster")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.LedgerVerifierKey = filepath.Join(dir, "ledger.vkey")
	if err := os.WriteFile(c.LedgerVerifierKey, []byte(lk.VerifierKey+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for _, w := range o.Witnesses {
		if err := w.AddLog(ctx, lk.Verifier.Name(), lk.VerifierKey); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.witnessArgs = append(c.witnessArgs, "--ledger-witness", w.Spec())
	}
	c.Keys = filepath.Join(dir, "keys.json")
	if _, _, err := keyring.LoadOrCreate(c.Keys); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.DoorKey, c.Doors = filepath.Join(dir, "door-key.json"), filepath.Join(dir, "doors.json")
	door, err := statement.NewKeyFile(c.DoorKey, "cluster")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := statement.WriteDoors(c.Doors, statement.NewDoors(door.Public())); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}

	cfg := serverConfig{
		PGPort: ports[0], Shards: 4, LogLevel: "warn",
		Frontend: servicePorts{GRPC: ports[1], Membership: membership[0], HTTP: ports[2]},
		History:  servicePorts{GRPC: ports[3], Membership: membership[1]},
		Matching: servicePorts{GRPC: ports[4], Membership: membership[2]},
		Worker:   servicePorts{GRPC: ports[5], Membership: membership[3]},
	}
	if o.Mode == Documented {
		cfg.DynamicConfig = DocumentedDynamicConfig(moduleDir)
	}
	configFile := filepath.Join(dir, "temporal.yaml")
	if err := writeServerConfig(configFile, cfg); err != nil {
		return nil, err
	}
	// History alone serves metrics (a port of its own needs a file of its
	// own): the refusals of a busy workflow are counted there.
	historyCfg := cfg
	historyCfg.Metrics = hostPort(ports[6])
	historyConfigFile := filepath.Join(dir, "temporal-history.yaml")
	if err := writeServerConfig(historyConfigFile, historyCfg); err != nil {
		return nil, err
	}
	c.HistoryMetrics = "http://" + historyCfg.Metrics + "/metrics"
	c.History = newService(c.Binaries, historyConfigFile, "history", cfg.History.GRPC, dir)
	c.Matching = newService(c.Binaries, configFile, "matching", cfg.Matching.GRPC, dir)
	c.Frontend = newService(c.Binaries, configFile, "frontend", cfg.Frontend.GRPC, dir)
	c.InternalWorker = newService(c.Binaries, configFile, "worker", cfg.Worker.GRPC, dir)
	c.FrontendAddress = hostPort(cfg.Frontend.GRPC)
	// History first: on an empty database the services race to write the
	// cluster's metadata, and one of them exits.
	for _, p := range []*Process{c.History, c.Matching, c.Frontend, c.InternalWorker} {
		if err := p.Start(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	step("Temporal: history, matching, frontend and worker started (" + string(o.Mode) + " dynamic config)")

	if out, err := c.toolgateCommand(ctx, o.Toolgate, "namespace", "setup", "--wait", "2m"); err != nil {
		return nil, fmt.Errorf("cluster: toolgate namespace setup: %w\n%s", err, out)
	}
	step("toolgate namespace setup")

	for i := range o.Workers {
		w := c.newToolgateWorker(o.Toolgate, i+1)
		c.Workers = append(c.Workers, w)
		if err := w.Start(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if o.Serve {
		port, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		c.HTTPAddress = hostPort(port[0])
		c.Serve = c.newToolgateServe(o.Toolgate, o.TokensFile)
		if err := c.Serve.Start(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if o.Workers > 0 || o.Serve {
		step(fmt.Sprintf("toolgate: %d workers, serve %v", o.Workers, o.Serve))
	}
	return c, nil
}

// SetVisibility takes the visibility database away (up false) or gives it
// back, as a visibility outage would: PostgreSQL refuses connections to
// temporal_visibility and drops the open ones, so the server's visibility
// reads fail and its visibility writes wait in its queues (they land, late,
// once it is back). Everything else keeps running.
func (c *Cluster) SetVisibility(ctx context.Context, up bool) error {
	bin, err := postgresBinDir()
	if err != nil {
		return err
	}
	sql := "ALTER DATABASE temporal_visibility WITH ALLOW_CONNECTIONS true"
	if !up {
		sql = "ALTER DATABASE temporal_visibility WITH ALLOW_CONNECTIONS false; " +
			"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'temporal_visibility'"
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.pgPort),
		"-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", sql)
	cmd.Env = baseEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: set visibility up=%v: %w\n%s", up, err, out)
	}
	c.logf("cluster: visibility database up=%v", up)
	return nil
}

// DocumentedDynamicConfig is the dynamic config file docs/production.md
// and docker-compose.yml use.
func DocumentedDynamicConfig(moduleDir string) string {
	return filepath.Join(moduleDir, "deploy", "temporal", "dynamicconfig.yaml")
}

// Env is the environment that points a toolgate command at the cluster.
func (c *Cluster) Env() []string {
	return baseEnv("TEMPORAL_ADDRESS="+c.FrontendAddress, "TEMPORAL_NAMESPACE="+c.Namespace, "TOOLGATE_KEYS="+c.Keys,
		"TOOLGATE_DOOR_KEY="+c.DoorKey, "TOOLGATE_DOORS="+c.Doors)
}

// toolgateCommand runs a toolgate command against the cluster and returns
// its combined output.
func (c *Cluster) toolgateCommand(ctx context.Context, toolgate string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, toolgate, args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// newToolgateWorker is `toolgate worker` number n, sharing the workspace.
func (c *Cluster) newToolgateWorker(toolgate string, n int) *Process {
	return &Process{
		Name: "worker-" + strconv.Itoa(n),
		path: toolgate, args: []string{"worker", "--workspace", c.Workspace, "--metrics", "", "--ledger", c.LedgerDSN, "--ledger-key", c.LedgerVerifierKey},
		dir: c.dir, env: c.Env(),
		ready: printed("Worker running"),
	}
}

// newToolgateServe is `toolgate serve`; it is ready when /readyz says so.
func (c *Cluster) newToolgateServe(toolgate, tokens string) *Process {
	return &Process{
		Name: "serve",
		path: toolgate,
		args: append([]string{"serve", "--http", c.HTTPAddress, "--tokens", tokens, "--ledger", c.LedgerDSN, "--ledger-key", c.LedgerKey}, c.witnessArgs...),
		dir:  c.dir, env: c.Env(),
		ready: func(ctx context.Context, _ func() string) error {
			return poll(ctx, pollInterval, func() error {
				resp, err := http.Get("http://" + c.HTTPAddress + "/readyz")
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("/readyz: %s", resp.Status)
				}
				return nil
			})
		},
	}
}

// Processes are every process of the cluster, toolgate's first, in the
// order Close stops them.
func (c *Cluster) Processes() []*Process {
	var ps []*Process
	if c.Serve != nil {
		ps = append(ps, c.Serve)
	}
	ps = append(ps, c.Workers...)
	for _, p := range []*Process{c.Frontend, c.Matching, c.InternalWorker, c.History, c.Postgres} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// Logs is the end of every process's output (the last n bytes of each),
// for a failed test's report.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, p := range c.Processes() {
		out := p.Output()
		if len(out) > n {
			out = "…" + out[len(out)-n:]
		}
		fmt.Fprintf(&b, "----- %s -----\n%s\n", p.Name, out)
	}
	return b.String()
}

// Close kills every process and removes the cluster's files.
func (c *Cluster) Close() {
	for _, p := range c.Processes() {
		p.Kill()
	}
	_ = os.RemoveAll(c.dir)
}

// stepTimer returns a function that reports a step and its duration.
func (c *Cluster) stepTimer() func(string) {
	last := time.Now()
	return func(what string) {
		c.logf("cluster: %-90s %s", what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}
}
