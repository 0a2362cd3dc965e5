// Command temporalpg runs a Temporal server backed by PostgreSQL, in its own
// process, for toolgate's multi-process integration test
// (integration/postgres_test.go). It is what docker-compose.yml runs with the
// official images, in one small program the test can start, SIGTERM and
// start again on the same database:
//
//  1. creates the two databases when absent and brings their schemas up to
//     the versions embedded in the server module (postgresql/v12/temporal
//     and postgresql/v12/visibility), as `temporal-sql-tool setup-schema
//     -v 0.0` followed by `update-schema` would;
//  2. starts the server with devserver.Start on those stores: all four
//     services on 127.0.0.1 and devserver's tuned settings; the namespace
//     and toolgate's search attributes are registered when missing;
//  4. prints "temporalpg ready: ..." and serves until SIGTERM or SIGINT,
//     then stops the server and exits 0.
//
// It lives under testdata so `go test ./...` never builds it: it links the
// Temporal server, and only the PostgreSQL test needs it.
package main

import (
	"bytes"
	"context"
	"crypto/md5" // #nosec: versions the applied schema change, as temporal-sql-tool does
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	"go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/common/resolver"
	dbschemas "go.temporal.io/server/schema"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/toolgate/toolgate/devserver"
	"github.com/toolgate/toolgate/workflows"
)

const (
	// Embedded schema directories (go.temporal.io/server/schema).
	mainSchema       = "postgresql/v12/temporal"
	visibilitySchema = "postgresql/v12/visibility"
	// startTimeout bounds schema setup, start and registration.
	startTimeout = 2 * time.Minute
)

// options are the command-line flags.
type options struct {
	pgHost, pgUser, pgPassword string
	pgPort                     int
	adminDB, db, visibilityDB  string
	port, shards               int
	namespace, logLevel        string
}

func main() {
	var o options
	flag.StringVar(&o.pgHost, "pg-host", "127.0.0.1", "PostgreSQL host")
	flag.IntVar(&o.pgPort, "pg-port", 5432, "PostgreSQL port")
	flag.StringVar(&o.pgUser, "pg-user", "postgres", "PostgreSQL user; needs CREATEDB when the databases are absent")
	flag.StringVar(&o.pgPassword, "pg-password", os.Getenv("PGPASSWORD"), "PostgreSQL password (env PGPASSWORD)")
	flag.StringVar(&o.adminDB, "pg-admin-db", "postgres", "database to connect to when creating the others")
	flag.StringVar(&o.db, "db", "temporal", "database of the default store")
	flag.StringVar(&o.visibilityDB, "visibility-db", "temporal_visibility", "database of the visibility store")
	flag.IntVar(&o.port, "port", 7233, "frontend gRPC port on 127.0.0.1")
	flag.IntVar(&o.shards, "shards", 4, "history shards; fixed when the database is created")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace to register")
	flag.StringVar(&o.logLevel, "log-level", "warn", "server log level: debug, info, warn or error")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "temporalpg:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	level, err := zapcore.ParseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	zcfg := zap.NewDevelopmentConfig()
	zcfg.Level = zap.NewAtomicLevelAt(level)
	zcfg.DisableStacktrace = true
	zl, err := zcfg.Build()
	if err != nil {
		return err
	}
	logger := log.NewZapLogger(zl)

	began := time.Now()
	setupCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	store, visibility := o.sqlConfig(o.db), o.sqlConfig(o.visibilityDB)
	for _, s := range []struct {
		cfg *config.SQL
		dir string
	}{{store, mainSchema}, {visibility, visibilitySchema}} {
		if err := ensureSchema(s.cfg, o.adminDB, s.dir, logger); err != nil {
			return fmt.Errorf("schema of %s: %w", s.cfg.DatabaseName, err)
		}
	}

	srv, err := devserver.Start(setupCtx, devserver.Options{
		Port:             o.port,
		Namespace:        o.namespace,
		SearchAttributes: workflows.SearchAttributeTypes(),
		Logger:           zl,
		SQL:              &devserver.SQLStores{Store: store, Visibility: visibility, Shards: int32(o.shards)},
	})
	if err != nil {
		return err
	}
	fmt.Printf("temporalpg ready: frontend %s namespace %s (took %s)\n", srv.FrontendAddress(), o.namespace, time.Since(began).Round(time.Millisecond))

	<-ctx.Done()
	stopping := time.Now()
	err = srv.Stop()
	fmt.Printf("temporalpg stopped (took %s)\n", time.Since(stopping).Round(time.Millisecond))
	return err
}

func (o options) sqlConfig(db string) *config.SQL {
	return &config.SQL{
		PluginName:      postgresql.PluginName,
		DatabaseName:    db,
		ConnectAddr:     net.JoinHostPort(o.pgHost, strconv.Itoa(o.pgPort)),
		ConnectProtocol: "tcp",
		User:            o.pgUser,
		Password:        o.pgPassword,
		// Per service and store: four services, two stores.
		MaxConns:        20,
		MaxIdleConns:    20,
		MaxConnLifetime: time.Hour,
	}
}

// ensureSchema creates the database when absent and applies the embedded
// versioned schema changes newer than its recorded version, as
// `temporal-sql-tool create-database`, `setup-schema -v 0.0` and
// `update-schema --schema-name dir` do. (The tool itself is not linked: its
// CLI dependency is not in this module's graph, and a testdata program
// cannot add one that `go mod tidy` would keep.)
func ensureSchema(cfg *config.SQL, adminDB, dir string, logger log.Logger) error {
	admin := *cfg
	admin.DatabaseName = adminDB
	if err := withAdminDB(&admin, logger, func(db sqlplugin.AdminDB) error {
		return db.CreateDatabase(cfg.DatabaseName) // a no-op when it exists
	}); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	return withAdminDB(cfg, logger, func(db sqlplugin.AdminDB) error {
		current, err := db.ReadSchemaVersion(cfg.DatabaseName)
		if err != nil { // no version table yet: a new database
			if err := db.CreateSchemaVersionTables(); err != nil {
				return fmt.Errorf("create schema version tables: %w", err)
			}
			if err := db.UpdateSchemaVersion(cfg.DatabaseName, "0.0", "0.0"); err != nil {
				return fmt.Errorf("set initial schema version: %w", err)
			}
			if err := db.WriteSchemaUpdateLog("0", "0.0", "", "initial version"); err != nil {
				return fmt.Errorf("write schema update log: %w", err)
			}
			current = "0.0"
		}
		return updateSchema(db, cfg.DatabaseName, dir, current)
	})
}

func withAdminDB(cfg *config.SQL, logger log.Logger, f func(sqlplugin.AdminDB) error) error {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("connect to %s/%s: %w", cfg.ConnectAddr, cfg.DatabaseName, err)
	}
	defer func() { _ = db.Close() }()
	return f(db)
}

// manifest is a versioned schema directory's manifest.json.
type manifest struct {
	CurrVersion          string
	MinCompatibleVersion string
	Description          string
	SchemaUpdateCqlFiles []string
}

// updateSchema applies, in version order, each embedded dir/versioned/vX.Y
// newer than current, recording each version as it lands.
func updateSchema(db sqlplugin.AdminDB, database, dir, current string) error {
	assets := dbschemas.Assets()
	versioned := path.Join(dir, "versioned")
	entries, err := fs.ReadDir(assets, versioned)
	if err != nil {
		return fmt.Errorf("read embedded %s: %w", versioned, err)
	}
	from, err := parseVersion(current)
	if err != nil {
		return fmt.Errorf("recorded schema version: %w", err)
	}
	type step struct {
		dir string
		ver [2]int
	}
	var steps []step
	for _, e := range entries {
		v, err := parseVersion(strings.TrimPrefix(e.Name(), "v"))
		if e.IsDir() && err == nil && cmpVersion(v, from) > 0 {
			steps = append(steps, step{path.Join(versioned, e.Name()), v})
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return cmpVersion(a.ver, b.ver) })
	for _, s := range steps {
		raw, err := fs.ReadFile(assets, path.Join(s.dir, "manifest.json"))
		if err != nil {
			return err
		}
		var m manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%s/manifest.json: %w", s.dir, err)
		}
		for _, file := range m.SchemaUpdateCqlFiles {
			if err := execFile(db, path.Join(s.dir, file)); err != nil {
				return err
			}
		}
		if err := db.UpdateSchemaVersion(database, m.CurrVersion, m.MinCompatibleVersion); err != nil {
			return fmt.Errorf("record schema version %s: %w", m.CurrVersion, err)
		}
		sum := md5.Sum(raw) // #nosec
		if err := db.WriteSchemaUpdateLog(current, m.CurrVersion, hex.EncodeToString(sum[:]), m.Description); err != nil {
			return fmt.Errorf("write schema update log: %w", err)
		}
		current = m.CurrVersion
	}
	return nil
}

// execFile runs the statements of one embedded .sql file. A statement that
// fails because its object already exists (or is already gone) is skipped,
// as temporal-sql-tool does: a version's statements are not one
// transaction, so a setup interrupted half-way is resumed by re-running it.
func execFile(db sqlplugin.AdminDB, name string) error {
	raw, err := fs.ReadFile(dbschemas.Assets(), name)
	if err != nil {
		return err
	}
	stmts, err := persistence.LoadAndSplitQueryFromReaders([]io.Reader{bytes.NewReader(raw)})
	if err != nil {
		return fmt.Errorf("parse %s: %w", name, err)
	}
	for _, stmt := range stmts {
		if err := db.Exec(stmt); err != nil {
			if msg := err.Error(); strings.Contains(msg, "already exist") || strings.Contains(msg, "not found") {
				continue
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// parseVersion reads "MAJOR.MINOR".
func parseVersion(s string) ([2]int, error) {
	var v [2]int
	major, minor, ok := strings.Cut(s, ".")
	var err1, err2 error
	v[0], err1 = strconv.Atoi(major)
	v[1], err2 = strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil {
		return v, fmt.Errorf("version %q is not MAJOR.MINOR", s)
	}
	return v, nil
}

func cmpVersion(a, b [2]int) int { return slices.Compare(a[:], b[:]) }
