package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/fsmode"
)

// A verifier's state file holds the latest checkpoint it verified of one
// log, the signed note as the log published it: its first line names the
// log. The next verification refuses a log that does not extend it.

// ReadVerifierState reads the checkpoint a verifier remembers in path,
// checked with verifier's key. ok is false when there is no file yet:
// trust on first use. A state of another log is refused, naming both.
func ReadVerifierState(path string, verifier note.Verifier) (c Checkpoint, ok bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Checkpoint{}, false, nil
	case err != nil:
		return Checkpoint{}, false, fmt.Errorf("read the verifier's state: %w", err)
	}
	origin, _, _ := bytes.Cut(b, []byte("\n"))
	if string(origin) != verifier.Name() {
		return Checkpoint{}, false, fmt.Errorf("the verifier's state is of log %q, not %q: a state file remembers one log", clipOrigin(origin), verifier.Name())
	}
	c, err = ParseCheckpoint(b, verifier)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("the verifier's state does not hold a checkpoint of the log: %w", err)
	}
	return c, true, nil
}

// clipOrigin shortens what a state file holds where an origin should be,
// to quote it back.
func clipOrigin(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// WriteVerifierState remembers c in path, owner-only (fsmode.File): the
// note is written whole to a file beside it, then renamed over it, so a
// crash leaves the old state or the new one.
func WriteVerifierState(path string, c Checkpoint) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, fsmode.Dir); err != nil {
		return fmt.Errorf("write the verifier's state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write the verifier's state: %w", err)
	}
	defer os.Remove(tmp.Name()) // once renamed, there is nothing to remove
	werr := tmp.Chmod(fsmode.File)
	if werr == nil {
		_, werr = tmp.Write(c.Note)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return fmt.Errorf("write the verifier's state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write the verifier's state: %w", err)
	}
	return nil
}
