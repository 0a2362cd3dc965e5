package devserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/fsmode"
)

// dbFileName is the SQLite file inside Options.DataDir.
const dbFileName = "temporal.db"

// defaultStartTimeout bounds Start when the caller's context has no
// deadline, so a server that never becomes ready fails instead of hanging.
const defaultStartTimeout = time.Minute

// Options configure Start. Zero values are sane defaults.
type Options struct {
	// DataDir is the directory for temporal.db; it is created if missing.
	// Required unless SQL is set.
	DataDir string
	// Port is the frontend gRPC port on 127.0.0.1; 0 picks a free port.
	Port int
	// Namespace is the namespace ensured on every start; default "default".
	Namespace string
	// SearchAttributes are registered (custom, in the namespace) on every
	// start if absent.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's logs; nil discards them. The server is
	// noisy: pass a logger at Warn level unless debugging.
	Logger *zap.Logger
	// SQL, when set, replaces the SQLite file with these stores (e.g.
	// PostgreSQL); DataDir is then unused. Their schemas must be set up
	// already; the namespace is registered through the frontend if absent.
	SQL *SQLStores
	// ServerTraces lets the server export its own spans when the
	// environment says so (OTEL_TRACES_EXPORTER=otlp and the OTLP
	// variables): tens of MB a minute. False: the server is built without
	// seeing OTEL_TRACES_EXPORTER, so toolgate's own tracing, set with the
	// same variables, does not turn the server's on.
	ServerTraces bool
}

// SQLStores are the databases of a server that does not use SQLite.
type SQLStores struct {
	Store, Visibility *config.SQL
	// Shards is the number of history shards; it is fixed when the
	// database is first used. Default 1.
	Shards int32
}

// Server is a running embedded Temporal server. Stop it with Stop.
type Server struct {
	srv          temporal.Server
	frontendAddr string
	namespace    string
	logger       *zap.Logger
	logGate      *logGate

	stopOnce sync.Once
	stopErr  error
	// stopForcing ends the forced search attribute refresh once the
	// attributes Start added are in every service's namespace registry.
	stopForcing *time.Timer
	settled     chan struct{}
	settle      sync.Once
}

// Start starts the server, creates the schema if the SQLite file is new,
// ensures the namespace and the search attributes, and returns when the
// frontend answers for the namespace.
func Start(ctx context.Context, o Options) (*Server, error) {
	o, err := withDefaults(o)
	if err != nil {
		return nil, err
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}

	began := time.Now()
	ports, err := pickPorts(o.Port)
	if err != nil {
		return nil, err
	}
	var cfg *config.Config
	partitions := 0 // the server's default, for stores another tool set up
	if o.SQL != nil {
		cfg = buildConfig(o.SQL.Store, o.SQL.Visibility, o.SQL.Shards, ports)
	} else {
		sqlite := sqlConfig(filepath.Join(o.DataDir, dbFileName))
		cfg = buildConfig(sqlite, sqlite, 1, ports)
		if partitions, err = preparePersistence(sqlite, o.Namespace, o.Logger); err != nil {
			return nil, err
		}
	}

	if !o.ServerTraces {
		defer hideEnv(envTracesExporter)()
	}
	gate := newLogGate()
	serverLogger := log.NewZapLogger(gate.wrap(o.Logger.Named("temporal")))
	dc, stopForcing := newDynamicConfig(partitions)
	srv, err := temporal.NewServer(
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithConfig(cfg),
		temporal.WithStaticHosts(staticHosts(ports)),
		temporal.WithDynamicConfigClient(dc),
		temporal.WithLogger(serverLogger),
	)
	if err != nil {
		return nil, fmt.Errorf("devserver: create server: %w", err)
	}
	s := &Server{srv: srv, frontendAddr: ports.frontendAddr(), namespace: o.Namespace, logger: o.Logger, logGate: gate,
		settled: make(chan struct{})}
	added, err := s.startAndAwait(ctx, o.SQL != nil, o.SearchAttributes, log.NewSdkLogger(serverLogger))
	if err == nil {
		// Every service loaded the namespace at start; one loaded before
		// the attributes were added reloads it within the settle time.
		settle := func() { stopForcing(); s.markSettled() }
		if added {
			s.stopForcing = time.AfterFunc(searchAttributesSettle, settle)
		} else {
			settle()
		}
	}
	if err != nil {
		// Do not leak a half-started server (ports, goroutines). Stopping
		// services that are still starting logs spurious errors; the cause
		// was logged already and is in err, so stop silently.
		gate.stopped()
		_ = s.Stop()
		return nil, err
	}
	o.Logger.Debug("devserver started",
		zap.String("frontend", s.frontendAddr),
		zap.String("dataDir", o.DataDir),
		zap.Duration("took", time.Since(began)))
	return s, nil
}

// withDefaults validates o and fills in defaults, creating DataDir
// (owner-only: workflow histories hold tool inputs and outputs), or
// tightening it.
func withDefaults(o Options) (Options, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	switch {
	case o.SQL != nil:
		if o.SQL.Store == nil || o.SQL.Visibility == nil {
			return o, errors.New("devserver: Options.SQL needs both Store and Visibility")
		}
		if o.SQL.Shards <= 0 {
			o.SQL.Shards = 1
		}
	case o.DataDir == "":
		return o, errors.New("devserver: Options.DataDir is required")
	default:
		if err := fsmode.MkdirAll(o.Logger, o.DataDir); err != nil {
			return o, fmt.Errorf("devserver: create data dir: %w", err)
		}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	return o, nil
}

// startAndAwait starts the services, dials the frontend until it serves the
// namespace, then ensures the search attributes, reporting whether it
// added any. The client is only used for this setup.
func (s *Server) startAndAwait(ctx context.Context, registerNamespace bool, attrs map[string]enumspb.IndexedValueType, clientLogger *log.SdkLogger) (bool, error) {
	if err := s.srv.Start(); err != nil {
		return false, fmt.Errorf("devserver: start server: %w", err)
	}
	if registerNamespace {
		if err := ensureNamespace(ctx, client.Options{HostPort: s.frontendAddr, Logger: clientLogger}, s.namespace); err != nil {
			return false, err
		}
	}
	c, err := dialWhenReady(ctx, client.Options{
		HostPort:  s.frontendAddr,
		Namespace: s.namespace,
		Logger:    clientLogger,
	})
	if err != nil {
		return false, err
	}
	defer c.Close()
	return ensureSearchAttributes(ctx, c, s.namespace, attrs)
}

// Settled is closed once every read of the search attributes is served
// from the services' caches again: at once when Start added none, a few
// seconds after Start when it did (until then each read is a database
// query, so a benchmark waits for it), or when the server stops.
func (s *Server) Settled() <-chan struct{} { return s.settled }

func (s *Server) markSettled() { s.settle.Do(func() { close(s.settled) }) }

// FrontendAddress is the "127.0.0.1:PORT" address clients dial.
func (s *Server) FrontendAddress() string { return s.frontendAddr }

// Namespace is the namespace the server was started with.
func (s *Server) Namespace() string { return s.namespace }

// Stop stops all services and releases their ports. It is safe to call
// more than once; later calls return the first call's result.
//
// The SQLite plugin keeps its connection in a process-wide pool that it
// never closes (a TODO in the server), so the file stays open until the
// process exits; every commit is already durable (see sqlConfig), and a
// later Start on the same DataDir in this process reuses the connection.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.stopForcing != nil {
			s.stopForcing.Stop()
		}
		s.markSettled()
		began := time.Now()
		s.logGate.stopping()
		s.stopErr = s.srv.Stop()
		s.logGate.stopped()
		s.logger.Debug("devserver stopped", zap.Duration("took", time.Since(began)), zap.Error(s.stopErr))
	})
	return s.stopErr
}

// envTracesExporter is the variable whose "otlp" turns the server's own
// tracing on (go.temporal.io/server/common/telemetry, read with
// os.LookupEnv while the server is built and started).
const envTracesExporter = "OTEL_TRACES_EXPORTER"

// hideEnv unsets a variable until restore is called. The server reads it
// from the process's environment, with no option to say otherwise.
func hideEnv(name string) (restore func()) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return func() {}
	}
	_ = os.Unsetenv(name)
	return func() { _ = os.Setenv(name, v) }
}
