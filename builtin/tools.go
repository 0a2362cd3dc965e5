package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/tool"
)

// Names of the built-in tools.
const (
	EchoTool      = "echo"
	ReadFileTool  = "read_file"
	ListDirTool   = "list_dir"
	WriteFileTool = "write_file"
	ShellTool     = "shell"
)

// Limits of the built-in tools. Outputs stay well under the activities'
// default 1 MiB output cap.
const (
	// DefaultReadBytes is how much read_file returns when max_bytes is not
	// given.
	DefaultReadBytes = 256 << 10
	// MaxReadBytes is the largest max_bytes read_file accepts.
	MaxReadBytes = 512 << 10
	// MaxListEntries caps the entries list_dir returns; more are dropped
	// and the output says "truncated".
	MaxListEntries = 1000
	// MarkerDir, below the workspace root, holds write_file's append
	// markers. write_file refuses to write inside it.
	MarkerDir = ".toolgate-calls"
)

// Tools returns the built-in tools, confined to ws: echo, read_file,
// list_dir, write_file and shell. Paths outside ws fail the call with a
// tool.Permanent error. write_file and shell have side effects, so they run
// at most once (Retry.MaxAttempts 1).
func Tools(ws Workspace) []tool.Tool {
	return []tool.Tool{
		{
			Name:        EchoTool,
			Description: "Return the arguments unchanged. Useful to test the tool pipeline.",
			Schema:      json.RawMessage(`{"type":"object"}`),
			Run:         runEcho,
			Options:     tool.Options{Timeout: 5 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}},
		},
		{
			Name:        ReadFileTool,
			Description: "Read a file of the workspace. Returns {path, content, truncated, size}; content is UTF-8 text, or base64 with encoding \"base64\" when the file is not valid UTF-8. At most max_bytes (default 262144) are returned.",
			Schema: json.RawMessage(`{
				"type": "object",
				"properties": {
					"path": {"type": "string", "minLength": 1, "description": "file path, relative to the workspace root"},
					"max_bytes": {"type": "integer", "minimum": 1, "maximum": 524288, "description": "how many bytes to return at most; default 262144"}
				},
				"required": ["path"],
				"additionalProperties": false
			}`),
			Run:     ws.readFile,
			Options: tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}},
		},
		{
			Name:        ListDirTool,
			Description: "List a directory of the workspace. Returns {path, entries: [{name, type: file|dir|symlink|other, size}]} sorted by name.",
			Schema: json.RawMessage(`{
				"type": "object",
				"properties": {
					"path": {"type": "string", "minLength": 1, "description": "directory path, relative to the workspace root; default \".\""}
				},
				"additionalProperties": false
			}`),
			Run:     ws.listDir,
			Options: tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}},
		},
		{
			Name:        WriteFileTool,
			Description: "Write content to a file of the workspace, creating parent directories. Replaces the file atomically, or appends when append is true. Returns {path, bytes_written}.",
			Schema: json.RawMessage(`{
				"type": "object",
				"properties": {
					"path": {"type": "string", "minLength": 1, "description": "file path, relative to the workspace root"},
					"content": {"type": "string", "description": "the text to write"},
					"append": {"type": "boolean", "description": "append instead of replacing; default false"}
				},
				"required": ["path", "content"],
				"additionalProperties": false
			}`),
			Run: ws.writeFile,
			// Overwrites are idempotent; appends are guarded by a marker,
			// which leaves a window (crash between append and marker), so
			// the tool is not retried.
			Options: tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 1}},
		},
		{
			Name:        ShellTool,
			Description: "Run a command with /bin/sh -c in the workspace root. Returns {exit_code, stdout, stderr, truncated, timed_out}; a non-zero exit code is a normal result. stdout and stderr are capped at 65536 bytes each.",
			Schema: json.RawMessage(`{
				"type": "object",
				"properties": {
					"command": {"type": "string", "minLength": 1, "description": "the shell command"},
					"timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 600, "description": "kill the command after this many seconds; default 30"}
				},
				"required": ["command"],
				"additionalProperties": false
			}`),
			Run: ws.runShell,
			// The attempt timeout outlives the longest command timeout, so
			// the command's own timeout fires first and reports timed_out.
			// The heartbeat lets a call whose worker died fail in seconds
			// instead of waiting out the ten-minute timeout.
			Options: tool.Options{Timeout: MaxShellTimeout + 30*time.Second, HeartbeatTimeout: 20 * time.Second,
				Retry: tool.RetryPolicy{MaxAttempts: 1}},
		},
	}
}

// runEcho returns its arguments unchanged.
func runEcho(_ context.Context, in tool.Input) (json.RawMessage, error) {
	if len(in.Args) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(in.Args) {
		return nil, tool.Permanent(errors.New("decode arguments: not valid JSON"))
	}
	return in.Args, nil
}

// readOutput is read_file's result.
type readOutput struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty"`
	Truncated bool   `json:"truncated"`
	Size      int64  `json:"size"`
}

func (w Workspace) readFile(_ context.Context, in tool.Input) (json.RawMessage, error) {
	var args struct {
		Path     string `json:"path"`
		MaxBytes *int64 `json:"max_bytes"`
	}
	if err := decodeArgs(in.Args, &args); err != nil {
		return nil, err
	}
	limit := int64(DefaultReadBytes)
	if args.MaxBytes != nil {
		if *args.MaxBytes < 1 || *args.MaxBytes > MaxReadBytes {
			return nil, tool.Permanent(fmt.Errorf("max_bytes %d is not between 1 and %d", *args.MaxBytes, MaxReadBytes))
		}
		limit = *args.MaxBytes
	}
	root, p, err := w.resolveArg(args.Path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	if fi.IsDir() {
		return nil, tool.Permanent(fmt.Errorf("read %q: is a directory (use list_dir)", args.Path))
	}
	if !fi.Mode().IsRegular() {
		// Opening a FIFO or a device could block or never end.
		return nil, tool.Permanent(fmt.Errorf("read %q: not a regular file", args.Path))
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	out := readOutput{Path: relTo(root, p), Size: fi.Size()}
	if int64(len(data)) > limit {
		data = trimPartialRune(data[:limit])
		out.Truncated = true
	}
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Content = base64.StdEncoding.EncodeToString(data)
		out.Encoding = "base64"
	}
	return marshal(out)
}

// listEntry is one entry of list_dir's result.
type listEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Size is the size of regular files, 0 for the other types.
	Size int64 `json:"size"`
}

// listOutput is list_dir's result.
type listOutput struct {
	Path      string      `json:"path"`
	Entries   []listEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

func (w Workspace) listDir(_ context.Context, in tool.Input) (json.RawMessage, error) {
	var args struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(in.Args, &args); err != nil {
		return nil, err
	}
	if args.Path == "" {
		args.Path = "."
	}
	root, p, err := w.resolveArg(args.Path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fileErr("list", args.Path, err)
	}
	if !fi.IsDir() {
		return nil, tool.Permanent(fmt.Errorf("list %q: not a directory", args.Path))
	}
	des, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, fileErr("list", args.Path, err)
	}
	out := listOutput{Path: relTo(root, p), Entries: make([]listEntry, 0, min(len(des), MaxListEntries))}
	for _, de := range des {
		if len(out.Entries) == MaxListEntries {
			out.Truncated = true
			break
		}
		info, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		e := listEntry{Name: de.Name()}
		switch mode := info.Mode(); {
		case mode&fs.ModeSymlink != 0:
			e.Type = "symlink"
		case mode.IsDir():
			e.Type = "dir"
		case mode.IsRegular():
			e.Type, e.Size = "file", info.Size()
		default:
			e.Type = "other" // device, socket, FIFO
		}
		out.Entries = append(out.Entries, e)
	}
	return marshal(out)
}

// writeOutput is write_file's result.
type writeOutput struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
	// AlreadyApplied says an append of this call ID was done before and
	// was not repeated.
	AlreadyApplied bool `json:"already_applied,omitempty"`
}

// writeMarker is the content of an append marker.
type writeMarker struct {
	CallID       string `json:"call_id"`
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
}

// writeFile writes or appends content. Idempotency, keyed on the call ID:
// an overwrite is an atomic rename of a complete temporary file, so
// repeating it leaves the same file. An append records a marker,
// MarkerDir/<sha256(callID, path)>, after writing; a call that finds its
// marker returns the recorded result without appending again. A crash
// between the append and the marker could still append twice, which is
// why the tool is not retried. Calls without a call ID keep no marker.
func (w Workspace) writeFile(_ context.Context, in tool.Input) (json.RawMessage, error) {
	var args struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
		Append  bool    `json:"append"`
	}
	if err := decodeArgs(in.Args, &args); err != nil {
		return nil, err
	}
	if args.Content == nil {
		return nil, tool.Permanent(errors.New("decode arguments: content is required"))
	}
	root, p, err := w.resolveArg(args.Path)
	if err != nil {
		return nil, err
	}
	rel := relTo(root, p)
	if rel == MarkerDir || strings.HasPrefix(rel, MarkerDir+"/") {
		return nil, tool.Permanent(fmt.Errorf("write %q: %s is reserved for toolgate", args.Path, MarkerDir))
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return nil, tool.Permanent(fmt.Errorf("write %q: is a directory", args.Path))
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fileErr("write", args.Path, err)
	}
	data := []byte(*args.Content)
	out := writeOutput{Path: rel, BytesWritten: len(data)}
	if !args.Append {
		if err := atomicWrite(p, data); err != nil {
			return nil, fileErr("write", args.Path, err)
		}
		return marshal(out)
	}

	var marker string
	if in.CallID != "" {
		sum := sha256.Sum256([]byte(in.CallID + "\x00" + rel))
		marker = filepath.Join(root, MarkerDir, hex.EncodeToString(sum[:]))
		if b, err := os.ReadFile(marker); err == nil {
			var m writeMarker
			if err := json.Unmarshal(b, &m); err == nil && m.CallID == in.CallID && m.Path == rel {
				out.BytesWritten, out.AlreadyApplied = m.BytesWritten, true
				return marshal(out)
			}
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fileErr("append to", args.Path, err)
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fileErr("append to", args.Path, werr)
	}
	if marker != "" {
		b, _ := json.Marshal(writeMarker{CallID: in.CallID, Path: rel, BytesWritten: len(data)})
		err := os.MkdirAll(filepath.Dir(marker), 0o755)
		if err == nil {
			err = atomicWrite(marker, b)
		}
		if err != nil {
			// The data is there; say so, so nobody appends it again.
			return nil, tool.Permanent(fmt.Errorf("appended %d bytes to %q but could not record the call marker: %w", len(data), args.Path, stripPath(err)))
		}
	}
	return marshal(out)
}

// atomicWrite replaces p with data through a temporary file in the same
// directory, keeping p's permissions if it exists (0644 otherwise).
func atomicWrite(p string, data []byte) (err error) {
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p); err == nil {
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".toolgate-tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// resolveArg resolves a path argument; a refusal is permanent.
func (w Workspace) resolveArg(p string) (root, resolved string, err error) {
	root, err = w.root()
	if err != nil {
		return "", "", tool.Permanent(err)
	}
	resolved, err = resolveIn(root, p)
	if err != nil {
		return "", "", tool.Permanent(err)
	}
	return root, resolved, nil
}

// decodeArgs decodes a call's arguments strictly; a failure is permanent.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return tool.Permanent(fmt.Errorf("decode arguments: %w", err))
	}
	return nil
}

// marshal encodes a tool's output without HTML escaping, which would
// grow text full of <, > and & six-fold.
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode output: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// fileErr reports a file system failure on the user's path, without the
// host path, as permanent when retrying cannot help.
func fileErr(op, userPath string, err error) error {
	err = fmt.Errorf("%s %q: %w", op, userPath, stripPath(err))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ELOOP) {
		return tool.Permanent(err)
	}
	return err
}

// stripPath drops the host path that os errors carry.
func stripPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// trimPartialRune drops an incomplete UTF-8 sequence that truncation left
// at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
