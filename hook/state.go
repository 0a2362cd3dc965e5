package hook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// usesKept is how long a tool_use_id stays mapped to the call that allowed
// it: far longer than any tool runs, so a PostToolUse always finds it.
const usesKept = 7 * 24 * time.Hour

// sessionState is what the hook remembers about one agent session between
// its runs: one file per session under the state directory. It only helps
// find calls: which call an identical attempt is waiting on, and which
// call a tool_use_id belongs to. Whether an approval was used is never
// read from it: each approval is claimed in its call's workflow, which
// accepts one run. So a lost, stale or edited file can cost a question,
// never a second run.
type sessionState struct {
	// Salt goes into every call ID of the session: a state file lost or
	// removed starts the session's attempts at fresh call IDs.
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
	// User: the hook answered "ask", handing the call to the agent's own
	// permission prompt; its outcome is the user's decision. Ran: the
	// tool's PostToolUse came, so the prompt approved it, even if toolgate
	// could not be told then.
	User bool `json:"user,omitempty"`
	Ran  bool `json:"ran,omitempty"`
	// Input is the digest of the tool and the input that runs, by which
	// Gemini CLI's AfterTool, which names no tool use, finds its run.
	Input string `json:"input,omitempty"`
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

// path is the session's state file.
func (s stateStore) path(session string) string { return filepath.Join(s.dir, session+".json") }

// remember records that the attempt key's calls start at gen.
func (s stateStore) remember(session, key string, gen int) error {
	return s.update(session, func(st *sessionState) error {
		if st.Keys[key].Gen < gen {
			st.Keys[key] = keyState{Gen: gen}
		}
		return nil
	})
}

// update locks the session's state, hands it to change, and writes it
// back when change returns nil. The lock is held only for the change,
// never while the hook waits for a decision.
func (s stateStore) update(session string, change func(st *sessionState) error) error {
	if err := s.checkDir(); err != nil {
		return err
	}
	path := s.path(session)
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

// checkDir makes the state directory if needed and refuses one that is a
// symbolic link, not a directory, or not this user's own.
func (s stateStore) checkDir() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("hook state directory: %w", err)
	}
	fi, err := os.Lstat(s.dir)
	switch {
	case err != nil:
		return fmt.Errorf("hook state directory: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("hook state directory %s is a symbolic link: give --state-dir the directory itself", s.dir)
	case !fi.IsDir():
		return fmt.Errorf("hook state directory %s is not a directory", s.dir)
	}
	return checkOwn("hook state directory", s.dir, fi)
}

// readState reads a session's state file, never through a symbolic link,
// and only when this user owns it.
func readState(path string) (*sessionState, error) {
	st := &sessionState{}
	b, err := readOwnFile(path)
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

func readOwnFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: remove it, the hook keeps its state in plain files", path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if err := checkOwn("hook state file", path, fi); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, maxStateBytes+1))
}

// maxStateBytes bounds a state file the hook reads.
const maxStateBytes = 16 << 20

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
