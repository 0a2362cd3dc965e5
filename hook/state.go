package hook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// usesKept is how long a tool_use_id stays mapped to the call that allowed
// it: far longer than any tool runs, so a PostToolUse always finds it.
const usesKept = 7 * 24 * time.Hour

// sessionState is what the hook remembers about one agent session between
// its runs: one file per session under the state directory.
type sessionState struct {
	// Salt goes into every call ID of the session, so a state file lost or
	// removed can never lead a new attempt to an old call and replay its
	// decision: the next attempt gets a fresh salt and fresh call IDs.
	Salt string `json:"salt"`
	// Keys holds, per attempt key (session, tool, arguments), the
	// generation the next identical attempt uses.
	Keys map[string]keyState `json:"keys"`
	// Uses maps a tool_use_id the hook allowed to the call that allowed
	// it, until PostToolUse reports the tool's outcome.
	Uses map[string]use `json:"uses"`
}

type keyState struct {
	Gen int `json:"gen"`
}

type use struct {
	CallID string    `json:"call_id"`
	At     time.Time `json:"at"`
}

// stateStore keeps the session state files under dir. Every change is a
// read-modify-write under an exclusive lock on the session's lock file,
// written to a temporary file and renamed over the old one, so parallel
// hook processes (Claude Code runs the hooks of parallel tool calls at
// once) never lose each other's changes and a crash never leaves half a
// file.
type stateStore struct {
	dir string
}

// update locks the session's state, hands it to change, and writes it
// back when change returns nil. The lock is held only for the change,
// never while the hook waits for a decision.
func (s stateStore) update(session string, change func(st *sessionState) error) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("hook state directory: %w", err)
	}
	path := filepath.Join(s.dir, session+".json")
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("lock hook state: %w", err)
	}
	defer unlock()
	st, err := readState(path)
	if err != nil {
		return err
	}
	if err := change(st); err != nil {
		return err
	}
	for id, u := range st.Uses {
		if time.Since(u.At) > usesKept {
			delete(st.Uses, id)
		}
	}
	return writeState(path, st)
}

func readState(path string) (*sessionState, error) {
	st := &sessionState{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read hook state: %w", err)
	default:
		if err := json.Unmarshal(b, st); err != nil {
			return nil, fmt.Errorf("hook state %s is damaged (remove it to start the session's attempts afresh): %w", path, err)
		}
	}
	if st.Salt == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		st.Salt = hex.EncodeToString(b[:])
	}
	if st.Keys == nil {
		st.Keys = map[string]keyState{}
	}
	if st.Uses == nil {
		st.Uses = map[string]use{}
	}
	return st, nil
}

func writeState(path string, st *sessionState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write hook state: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write hook state: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write hook state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write hook state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write hook state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write hook state: %w", err)
	}
	return nil
}

// DefaultStateDir is where the hook keeps its state when --state-dir is
// not given: $XDG_STATE_HOME/toolgate/hooks, else
// ~/.local/state/toolgate/hooks.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "toolgate", "hooks")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "toolgate-hooks")
	}
	return filepath.Join(home, ".local", "state", "toolgate", "hooks")
}
