package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// InstallPostgres is how to get the PostgreSQL server binaries on Debian
// (scripts/test does it when they are missing).
const InstallPostgres = "sudo apt-get install -y postgresql"

// newPostgres creates a throwaway PostgreSQL cluster under dir (initdb)
// and returns its server process, not yet started. PostgreSQL refuses to
// run as root, so as root the cluster belongs to the postgres user (the
// Debian package creates it). Durability settings are off: a kill -9 of
// the server loses nothing the operating system has, and the cluster is
// thrown away at the end.
func newPostgres(dir string, port int) (*Process, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	pgDir := filepath.Join(dir, "postgres")
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs the postgres user, which its Debian package creates (%s): %w", InstallPostgres, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user must reach the directory (dir is under /tmp).
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(pgDir, uid, gid); err != nil {
			return nil, err
		}
		if err := os.Chmod(pgDir, 0o700); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(pgDir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-locale", "-E", "UTF8", "--no-sync")
	initdb.Dir = pgDir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return &Process{
		Name: "postgres",
		path: filepath.Join(bin, "postgres"),
		args: []string{"-D", data, "-p", strconv.Itoa(port), "-k", pgDir,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"},
		dir:   pgDir,
		env:   baseEnv(),
		cred:  cred,
		ready: printed("database system is ready to accept connections"),
	}, nil
}

// postgresBinDir finds initdb and postgres: the newest
// /usr/lib/postgresql/*/bin (Debian keeps them off PATH), else PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	return "", fmt.Errorf("the PostgreSQL server binaries (initdb, postgres) are not installed: not in /usr/lib/postgresql/*/bin nor on PATH; install them with: %s", InstallPostgres)
}

// Dump is pg_dump of one of the cluster's databases (temporal,
// temporal_visibility, toolgate_ledger): every row as the database holds
// it, for a test that looks for what must not be there.
func (c *Cluster) Dump(ctx context.Context, database string) ([]byte, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.pgPort), "-U", "postgres", "--data-only", database)
	cmd.Env = baseEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pg_dump %s: %w\n%s", database, err, stderr.String())
	}
	return out, nil
}

// StartPostgres starts a throwaway PostgreSQL (Debian's server binaries,
// initdb under dir, a free port on loopback) for the tests of a store that
// keeps its data in PostgreSQL, and returns the DSN of its postgres
// database and how to stop it.
func StartPostgres(ctx context.Context, dir string) (dsn string, stop func(), err error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", nil, err
	}
	p, err := newPostgres(dir, ports[0])
	if err != nil {
		return "", nil, err
	}
	if err := p.Start(ctx); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", ports[0]), func() { _ = p.Stop() }, nil
}
