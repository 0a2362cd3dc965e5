package main

import (
	"fmt"
	"path/filepath"

	"github.com/toolgate/toolgate/fsmode"
)

// devDataDir makes toolgate dev's data dir owner-only (0700), tightening
// an existing one, and tightens the embedded Temporal server's database
// there, which an older toolgate left with the umask's mode. devserver
// tightens it too, but logs on the server's logger, which passes errors
// only; the ledger's database is tightened, and logged, when it opens.
func (a *app) devDataDir(dir string) error {
	if err := fsmode.MkdirAll(a.logger, dir); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if err := fsmode.TightenSQLite(a.logger, filepath.Join(dir, "temporal.db")); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return nil
}
