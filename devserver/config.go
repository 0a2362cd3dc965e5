package devserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/schema/sqlite"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/fsmode"
)

const (
	// host is where every service listens: the dev server is local only.
	host = "127.0.0.1"
	// clusterName names the single, non-global cluster.
	clusterName = "active"
)

// ports are the gRPC ports of the four services. With static hosts there
// is no ringpop, so no membership ports are needed.
type ports struct {
	frontend, history, matching, worker int
}

func (p ports) frontendAddr() string { return hostPort(p.frontend) }

func hostPort(port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// pickPorts uses frontend if non-zero and free ports for everything else.
// The chosen ports are held until all are picked, so they are distinct,
// then released for the server to bind. Another process could take one in
// between; the server would then log a Fatal, as for a taken frontend port.
func pickPorts(frontend int) (ports, error) {
	var p ports
	targets := []*int{&p.history, &p.matching, &p.worker}
	if frontend != 0 {
		// Held while the others are picked: released first, the kernel
		// could hand it out again as one of them.
		l, err := net.Listen("tcp", hostPort(frontend))
		if err != nil {
			return p, fmt.Errorf("devserver: frontend port %d is not free: %w", frontend, err)
		}
		defer func() { _ = l.Close() }()
		p.frontend = frontend
	} else {
		targets = append(targets, &p.frontend)
	}
	for _, t := range targets {
		l, err := net.Listen("tcp", hostPort(0))
		if err != nil {
			return p, fmt.Errorf("devserver: find a free port: %w", err)
		}
		defer func() { _ = l.Close() }()
		*t = l.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}

// staticHosts tells each service where the others are, replacing ringpop:
// every service runs once, in this process.
func staticHosts(p ports) map[primitives.ServiceName]static.Hosts {
	return map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(hostPort(p.frontend)),
		primitives.HistoryService:  static.SingleLocalHost(hostPort(p.history)),
		primitives.MatchingService: static.SingleLocalHost(hostPort(p.matching)),
		primitives.WorkerService:   static.SingleLocalHost(hostPort(p.worker)),
	}
}

// sqlConfig points the SQLite plugin at dbPath.
//
// Keys that are not SQLite URI parameters become `_pragma=key=value` in the
// DSN, so pragmas are given WITHOUT a leading underscore (an underscore
// would make SQLite silently ignore an unknown pragma).
//
//   - journal_mode=wal: readers do not block the writer and a commit is one
//     append to the -wal file: ~2.5× the throughput of the rollback
//     journal. After a crash the committed state lives partly in the -wal
//     file, so temporal.db, -wal and -shm must be copied together.
//   - synchronous=FULL: fsync the WAL on every commit. NORMAL would already
//     survive kill -9 (the data reached the OS before the commit returned),
//     but can lose the last commits on power loss or an OS crash. Temporal
//     acknowledges a start, signal or completion only after its commit, so
//     a lost commit would be a lost acknowledged event: pay the fsync.
func sqlConfig(dbPath string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "FULL",
		},
	}
}

// buildConfig is the static server config: the default and visibility
// stores (one SQLite file serves both), a single local cluster, archival
// off, no metrics or pprof listeners.
func buildConfig(store, visibility *config.SQL, shards int32, p ports) *config.Config {
	rpc := func(port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: host}}
	}
	stores := map[string]config.DataStore{store.PluginName: {SQL: store}}
	visibilityName := store.PluginName
	if visibility != store {
		visibilityName = "visibility"
		stores[visibilityName] = config.DataStore{SQL: visibility}
	}
	return &config.Config{
		Persistence: config.Persistence{
			DefaultStore:     store.PluginName,
			VisibilityStore:  visibilityName,
			NumHistoryShards: shards,
			DataStores:       stores,
		},
		ClusterMetadata: &cluster.Config{
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: p.frontendAddr()},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			string(primitives.FrontendService): rpc(p.frontend),
			string(primitives.HistoryService):  rpc(p.history),
			string(primitives.MatchingService): rpc(p.matching),
			string(primitives.WorkerService):   rpc(p.worker),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{
			Archival: config.ArchivalNamespaceDefaults{
				History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
				Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
			},
		},
		// The internal worker service (system workflows) dials the
		// frontend through this (temporaltest notes a panic without it).
		PublicClient: config.PublicClient{HostPort: p.frontendAddr()},
	}
}

// dynamicConfig holds the settings that differ from the server defaults.
// Update and signal-with-start need nothing: both are on by default in 1.32.
func dynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		// The transfer and timer queues poll persistence at 20 RPS per
		// shard by default, which adds ~50 ms to every task dispatch; at
		// 1000 a workflow with one activity takes ~20 ms.
		dynamicconfig.TransferProcessorMaxPollRPS.Key(): 1000,
		dynamicconfig.TimerProcessorMaxPollRPS.Key():    1000,
		// About 1 run in 200 missed a long-poll notification and waited the
		// full 20 s default for its result; 2 s caps that stall.
		dynamicconfig.HistoryLongPollExpirationInterval.Key(): 2 * time.Second,
		// Visibility APIs are limited to 10 RPS per namespace by default,
		// which a UI or a test polling list queries exceeds (as the CLI dev
		// server does, raise it).
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		// A closed workflow is deleted (`temporal workflow delete`) only
		// once the transfer queue's ack level has passed its close task,
		// and that level is saved every 30 s by default: deletes took a
		// minute or more.
		dynamicconfig.TransferProcessorUpdateAckInterval.Key(): 2 * time.Second,
		// Server.Stop never stops these system workers (upstream "TODO:
		// Nothing is gracefully stopping these workers"): each stopped
		// server would leak ~100 goroutines polling a dead frontend and
		// logging warnings, and after a restart on the same port they would
		// take tasks with clients of the stopped server. None matters here:
		// without the worker, history applies parent close policies inline
		// (the worker only offloads large fan-outs), and the scanners only
		// garbage-collect idle task queues and orphaned history branches.
		dynamicconfig.EnableParentClosePolicyWorker.Key(): false,
		dynamicconfig.TaskQueueScannerEnabled.Key():       false,
		dynamicconfig.HistoryScannerEnabled.Key():         false,
		dynamicconfig.NamespaceCacheRefreshInterval.Key(): namespaceRefreshInterval,
	}
}

// namespaceRefreshInterval is how often each service's namespace registry
// reloads the namespaces (the server's default, pinned here). On a SQL
// store a custom search attribute is an alias in its namespace's record,
// so a service sees one added at its registry's next reload; the cluster
// metadata the search attribute manager caches for a minute is not
// changed by the add.
const namespaceRefreshInterval = 2 * time.Second

// searchAttributesSettle is how long after Start added search attributes
// every registry has reloaded since: a reload begun before the add, the
// next one, and a margin.
const searchAttributesSettle = 2*namespaceRefreshInterval + time.Second

// newDynamicConfig returns the dynamic config of a server whose task queues
// have the given partitions (0: the server's default), plus a func
// that ends the forced refresh of search attributes (idempotent).
//
// The refresh is forced while Start registers attributes, so that one added
// there is usable at once instead of after a service's registry reloads. It
// must not stay forced: every row a visibility listing returns reads the
// attributes again, and with the refresh forced each read is a database
// query. With 10,000 calls waiting, a page of 1,000 took 0.7 to 5 s that
// way, and 0.16 s without.
func newDynamicConfig(partitions int) (*dynamicconfig.MemoryClient, func()) {
	dc := dynamicconfig.NewMemoryClient()
	for key, value := range dynamicConfig() {
		dc.OverrideValue(key, value)
	}
	if partitions > 0 {
		dc.OverrideValue(dynamicconfig.MatchingNumTaskqueueWritePartitions.Key(), partitions)
		dc.OverrideValue(dynamicconfig.MatchingNumTaskqueueReadPartitions.Key(), partitions)
	}
	stopForcing := dc.OverrideValue(dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(), true)
	return dc, stopForcing
}

// preparePersistence creates the schema when the DB file is new (missing,
// or empty: made by fsmode.SQLite and never written), and the namespace if
// it is missing (a no-op when it exists), before the server starts: a
// SQLite server has no other way to create its schema. The file and its
// side files are owner-only (workflow histories hold tool inputs and
// outputs); looser ones are tightened, and told to log. It returns the
// database's task-queue partitions (taskQueuePartitions).
func preparePersistence(sqlCfg *config.SQL, namespace string, log *zap.Logger) (partitions int, err error) {
	path := sqlCfg.DatabaseName
	info, statErr := os.Stat(path)
	fresh := errors.Is(statErr, fs.ErrNotExist) || statErr == nil && info.Size() == 0
	if statErr != nil && !fresh {
		return 0, fmt.Errorf("devserver: stat database: %w", statErr)
	}
	if err := fsmode.SQLite(log, path); err != nil {
		return 0, fmt.Errorf("devserver: database file: %w", err)
	}
	if fresh {
		if err := sqlite.SetupSchema(sqlCfg); err != nil {
			return 0, fmt.Errorf("devserver: set up schema: %w", err)
		}
	}
	if partitions, err = taskQueuePartitions(log, path, fresh); err != nil {
		return 0, err
	}
	ns, err := sqlite.NewNamespaceConfig(clusterName, namespace, false, nil)
	if err != nil {
		return 0, fmt.Errorf("devserver: namespace config: %w", err)
	}
	if err := sqlite.CreateNamespaces(sqlCfg, ns); err != nil {
		return 0, fmt.Errorf("devserver: create namespace: %w", err)
	}
	// The database was open: check the side files it made.
	if err := fsmode.SQLite(log, path); err != nil {
		return 0, fmt.Errorf("devserver: database file: %w", err)
	}
	return partitions, nil
}
