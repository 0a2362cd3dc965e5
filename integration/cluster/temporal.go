package cluster

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Binaries are the stock Temporal server and its SQL tool, built from the
// go.temporal.io/server module that toolgate's go.mod pins.
type Binaries struct {
	Server  string // go.temporal.io/server/cmd/server
	SQLTool string // go.temporal.io/server/cmd/tools/sql (temporal-sql-tool)
	Version string // the server module's version, e.g. v1.32.1
}

// Build builds the stock server and temporal-sql-tool once per server
// version and Go version, into TOOLGATE_CLUSTER_CACHE or the user's cache
// directory, and returns them; later calls find them there. Nothing is
// downloaded beyond what the module cache already holds.
func Build(ctx context.Context, moduleDir string) (Binaries, error) {
	version, err := goOutput(ctx, moduleDir, "list", "-m", "-f", "{{.Version}}", "go.temporal.io/server")
	if err != nil {
		return Binaries{}, err
	}
	cache := os.Getenv("TOOLGATE_CLUSTER_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return Binaries{}, fmt.Errorf("no cache directory for the Temporal binaries (set TOOLGATE_CLUSTER_CACHE): %w", err)
		}
		cache = filepath.Join(base, "toolgate", "cluster")
	}
	dir := filepath.Join(cache, version+"-"+runtime.Version())
	b := Binaries{Server: filepath.Join(dir, "temporal-server"), SQLTool: filepath.Join(dir, "temporal-sql-tool"), Version: version}
	if fileExists(b.Server) && fileExists(b.SQLTool) {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	// Built aside and renamed, so a build cut short never leaves a
	// binary that looks complete.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return Binaries{}, err
	}
	defer os.RemoveAll(tmp)
	if _, err := goOutput(ctx, moduleDir, "build", "-o", tmp+"/", "go.temporal.io/server/cmd/server", "go.temporal.io/server/cmd/tools/sql"); err != nil {
		return Binaries{}, err
	}
	if err := os.Rename(filepath.Join(tmp, "sql"), b.SQLTool); err != nil {
		return Binaries{}, err
	}
	if err := os.Rename(filepath.Join(tmp, "server"), b.Server); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// ModuleDir is the root of the toolgate module containing the working
// directory (where go.mod is).
func ModuleDir(ctx context.Context) (string, error) {
	gomod, err := goOutput(ctx, "", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module: run from the toolgate repository")
	}
	return filepath.Dir(gomod), nil
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// setupSchema creates Temporal's two databases and applies the schema with
// deploy/temporal/setup-schema.sh, the script docker-compose.yml runs,
// with the temporal-sql-tool just built on its PATH.
func setupSchema(ctx context.Context, moduleDir string, b Binaries, pgPort int) error {
	toolDir, err := os.MkdirTemp("", "toolgate-sqltool-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(toolDir)
	if err := os.Symlink(b.SQLTool, filepath.Join(toolDir, "temporal-sql-tool")); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", filepath.Join(moduleDir, "deploy", "temporal", "setup-schema.sh"))
	cmd.Env = baseEnv("PATH="+toolDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"POSTGRES_SEEDS=127.0.0.1", "DB_PORT="+strconv.Itoa(pgPort), "POSTGRES_USER=postgres", "SQL_PASSWORD=unused-with-trust-auth")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("deploy/temporal/setup-schema.sh: %w\n%s", err, out)
	}
	return nil
}

// servicePorts are one Temporal service's ports.
type servicePorts struct {
	GRPC, Membership, HTTP int
}

// serverConfig is what the server's config file is made from.
type serverConfig struct {
	PGPort        int
	Shards        int
	Frontend      servicePorts
	History       servicePorts
	Matching      servicePorts
	Worker        servicePorts
	DynamicConfig string // empty: the stock defaults, no file at all
	LogLevel      string
	// Metrics is the host:port the service serves its Prometheus metrics
	// on; empty: none.
	Metrics string
}

// configTemplate is the server's config: PostgreSQL persistence and SQL
// visibility with the connection limits of the temporalio/server image's
// defaults, ringpop membership through the database, four services on
// 127.0.0.1.
var configTemplate = template.Must(template.New("config").Parse(`log:
  stdout: true
  level: {{.LogLevel}}
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: {{.Shards}}
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: temporal
        connectAddr: "127.0.0.1:{{.PGPort}}"
        connectProtocol: tcp
        user: postgres
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: temporal_visibility
        connectAddr: "127.0.0.1:{{.PGPort}}"
        connectProtocol: tcp
        user: postgres
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
{{- if .Metrics}}
  metrics:
    prometheus:
      timerType: histogram
      listenAddress: "{{.Metrics}}"
{{- end}}
services:
  frontend:
    rpc: {grpcPort: {{.Frontend.GRPC}}, membershipPort: {{.Frontend.Membership}}, httpPort: {{.Frontend.HTTP}}, bindOnLocalHost: true}
  history:
    rpc: {grpcPort: {{.History.GRPC}}, membershipPort: {{.History.Membership}}, bindOnLocalHost: true}
  matching:
    rpc: {grpcPort: {{.Matching.GRPC}}, membershipPort: {{.Matching.Membership}}, bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: {{.Worker.GRPC}}, membershipPort: {{.Worker.Membership}}, bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:{{.Frontend.GRPC}}"
dcRedirectionPolicy:
  policy: noop
{{- if .DynamicConfig}}
dynamicConfigClient:
  filepath: "{{.DynamicConfig}}"
  pollInterval: 10s
{{- end}}
`))

func writeServerConfig(path string, c serverConfig) error {
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, c); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// newService returns one Temporal service's process, not yet started; it
// is ready when its gRPC port accepts connections.
func newService(b Binaries, configFile, service string, grpcPort int, dir string) *Process {
	return &Process{
		Name: service,
		path: b.Server,
		args: []string{"--config-file", configFile, "--allow-no-auth", "start", "--service", service},
		dir:  dir,
		env:  baseEnv(),
		ready: func(ctx context.Context, _ func() string) error {
			return poll(ctx, pollInterval, func() error { return dialTCP(grpcPort) })
		},
	}
}

// pollInterval paces readiness checks.
const pollInterval = 100 * time.Millisecond

func dialTCP(port int) error {
	c, err := net.DialTimeout("tcp", hostPort(port), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freeMembershipPorts returns n distinct free ports below 32768: the
// cluster_membership table keeps a service's membership port in a
// PostgreSQL smallint, and the kernel's ephemeral ports start above it.
func freeMembershipPorts(n int) ([]int, error) {
	var ports []int
	for port := 20000 + rand.IntN(10000); len(ports) < n && port < 32768; port++ {
		l, err := net.Listen("tcp", hostPort(port))
		if err != nil {
			continue
		}
		defer l.Close()
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free ports below 32768 for membership", n)
	}
	return ports, nil
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TemporalCLIVersion is the stock `temporal` CLI the suite reads
// histories with (its codec flags), built from source by BuildCLI.
const TemporalCLIVersion = "v1.5.1"

// BuildCLI builds the stock `temporal` CLI once per version and Go version,
// from its module's source (the Go module proxy, as for any module), into
// the same cache as Build, and returns its path.
func BuildCLI(ctx context.Context) (string, error) {
	dir, err := goInstall(ctx, "cli-"+TemporalCLIVersion, "github.com/temporalio/cli/cmd/temporal@"+TemporalCLIVersion)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "temporal"), nil
}

// goInstall installs the programs pkgs name (package@version each) from
// the Go module proxy once per name and Go version into the cluster cache,
// and returns the directory they are in.
func goInstall(ctx context.Context, name string, pkgs ...string) (string, error) {
	cache := os.Getenv("TOOLGATE_CLUSTER_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory for %s (set TOOLGATE_CLUSTER_CACHE): %w", name, err)
		}
		cache = filepath.Join(base, "toolgate", "cluster")
	}
	dir := filepath.Join(cache, name+"-"+runtime.Version())
	done := filepath.Join(dir, ".installed")
	if fileExists(done) || (name == "cli-"+TemporalCLIVersion && fileExists(filepath.Join(dir, "temporal"))) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// Outside this module: each builds against its own go.mod.
	cmd := exec.CommandContext(ctx, "go", append([]string{"install"}, pkgs...)...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %v: %w\n%s", pkgs, err, out)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
	}
	return dir, os.WriteFile(done, nil, 0o644)
}
