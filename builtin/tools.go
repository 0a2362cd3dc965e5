package builtin

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/confine"
	"github.com/toolgate/toolgate/policy"
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
// tool.Permanent error. write_file is idempotent by call ID, so it is
// retried; shell runs at most once.
func Tools(ws Workspace) []tool.Tool {
	// The hints MCP clients (and policy conditions) read; the default
	// policy knows these tools by name.
	readOnly := map[string]any{"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
	return []tool.Tool{
		{
			Name:        EchoTool,
			Description: "Return the arguments unchanged. Useful to test the tool pipeline.",
			Schema:      json.RawMessage(`{"type":"object"}`),
			Run:         runEcho,
			Options:     tool.Options{Timeout: 5 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}, Idempotent: true},
			Annotations: readOnly,
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
			Run:         ws.readFile,
			Options:     tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}, Idempotent: true},
			Annotations: readOnly,
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
			Run:         ws.listDir,
			Options:     tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}, Idempotent: true},
			Annotations: readOnly,
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
			Run:     ws.writeFile,
			Preview: ws.previewWrite,
			// Idempotent by call ID: an overwrite replaces the file whole,
			// an append records its offset first (appendOnce).
			Options:     tool.Options{Timeout: 30 * time.Second, Retry: tool.RetryPolicy{MaxAttempts: 3}, Idempotent: true},
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false},
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
			Run:     ws.runShell,
			Preview: ws.previewShell,
			Process: ws.process(),
			// The attempt timeout outlives the longest command timeout, so
			// the command's own timeout fires first and reports timed_out.
			// The heartbeat lets a call whose worker died fail in seconds
			// instead of waiting out the ten-minute timeout.
			Options: tool.Options{Timeout: MaxShellTimeout + 30*time.Second, HeartbeatTimeout: 20 * time.Second,
				Retry: tool.RetryPolicy{MaxAttempts: 1}},
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true},
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
	ws, rel, err := w.open(args.Path)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	// O_NONBLOCK: opening a FIFO must not block. The type is checked on the
	// opened file, so it cannot change after the check.
	f, real, err := ws.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	defer f.Close()
	if err := w.guard("read", args.Path, ws, real); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	if fi.IsDir() {
		return nil, tool.Permanent(fmt.Errorf("read %q: is a directory (use list_dir)", args.Path))
	}
	if !fi.Mode().IsRegular() {
		return nil, tool.Permanent(fmt.Errorf("read %q: not a regular file", args.Path))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fileErr("read", args.Path, err)
	}
	out := readOutput{Path: real, Size: fi.Size()}
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
	ws, rel, err := w.open(args.Path)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	dir, err := ws.OpenDir(rel)
	if err != nil {
		return nil, fileErr("list", args.Path, err)
	}
	defer dir.Close()
	if err := w.guard("list", args.Path, ws, dir.Rel()); err != nil {
		return nil, err
	}
	f, _, err := dir.OpenFile(".", os.O_RDONLY, 0)
	if err != nil {
		return nil, fileErr("list", args.Path, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fileErr("list", args.Path, err)
	}
	slices.Sort(names)
	out := listOutput{Path: dir.Rel(), Entries: make([]listEntry, 0, min(len(names), MaxListEntries))}
	for _, name := range names {
		if len(out.Entries) == MaxListEntries {
			out.Truncated = true
			break
		}
		// Through the opened directory, not by path: the entry is this
		// directory's, whatever happened to its name.
		info, err := dir.Root().Lstat(name)
		if err != nil {
			continue // removed since it was listed
		}
		e := listEntry{Name: name}
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
	// Offset is the file's size before the append; Done says it was made.
	Offset int64 `json:"offset"`
	Done   bool  `json:"done"`
}

// writeFile writes or appends content. The parent directory is opened
// once and everything happens through it, so a directory swapped for a
// symlink meanwhile cannot redirect the write. A file with more than one
// hard link is refused: another of its names may be outside the workspace.
//
// Idempotency, keyed on the call ID: an overwrite is an atomic rename of a
// complete temporary file, so repeating it leaves the same file; an append
// is made once per call ID (appendOnce). Calls without a call ID keep no
// marker.
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
	ws, rel, err := w.open(args.Path)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	if rel == "." {
		return nil, tool.Permanent(fmt.Errorf("write %q: is a directory", args.Path))
	}
	// Checked before creating parent directories, and again below on where
	// the parent really is.
	if err := w.checkWrite(args.Path, ws, rel); err != nil {
		return nil, err
	}
	if err := checkPreviewed(args.Path, rel, in.Previewed); err != nil {
		return nil, err
	}
	if err := ws.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return nil, fileErr("write", args.Path, err)
	}
	dir, err := ws.OpenDir(path.Dir(rel))
	if err != nil {
		return nil, fileErr("write", args.Path, err)
	}
	defer dir.Close()
	name := path.Base(rel)
	target := path.Join(dir.Rel(), name)
	if err := w.checkWrite(args.Path, ws, target); err != nil {
		return nil, err
	}
	// From here on the write goes to name in the opened dir, and an
	// overwrite replaces name itself, link or not: it lands on target.
	if err := checkPreviewed(args.Path, target, in.Previewed); err != nil {
		return nil, err
	}
	if fi, err := dir.Root().Lstat(name); err == nil {
		if fi.IsDir() {
			return nil, tool.Permanent(fmt.Errorf("write %q: is a directory", args.Path))
		}
		if err := refuseHardLinks(args.Path, fi); err != nil {
			return nil, err
		}
	}
	data := []byte(*args.Content)
	out := writeOutput{Path: target, BytesWritten: len(data)}
	if !args.Append {
		if err := atomicWrite(dir.Root(), name, data); err != nil {
			return nil, fileErr("write", args.Path, err)
		}
		return marshal(out)
	}

	f, err := w.openAppend(args.Path, ws, dir, name, target, in.Previewed)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if in.CallID == "" {
		if _, err := f.Write(data); err != nil {
			return nil, fileErr("append to", args.Path, err)
		}
		return marshal(out)
	}
	return w.appendOnce(ws, f, args.Path, in.CallID, target, data)
}

// appendOnce appends data to f once per call ID, so the tool can be
// retried: a marker, MarkerDir/<sha256(callID, path)>, records the file's
// size before the append is made, and Done after. A call that finds its
// marker done returns the recorded result; one that finds only the intent
// looks at the file: still at the recorded size, the append was never
// made and is made now; holding data at that offset, it was made. Anything
// else (the file changed meanwhile) is an unknown outcome, never a second
// append.
func (w Workspace) appendOnce(ws *confine.Dir, f *os.File, userPath, callID, target string, data []byte) (json.RawMessage, error) {
	sum := sha256.Sum256([]byte(callID + "\x00" + target))
	marker := hex.EncodeToString(sum[:])
	out := writeOutput{Path: target, BytesWritten: len(data)}
	fi, err := f.Stat()
	if err != nil {
		return nil, fileErr("append to", userPath, err)
	}
	m := writeMarker{CallID: callID, Path: target, BytesWritten: len(data), Offset: fi.Size()}
	if b, err := ws.Root().ReadFile(MarkerDir + "/" + marker); err == nil {
		var prev writeMarker
		if err := json.Unmarshal(b, &prev); err == nil && prev.CallID == callID && prev.Path == target {
			applied, err := prev.appliedTo(f, fi.Size(), data)
			switch {
			case err != nil:
				return nil, err
			case applied:
				out.BytesWritten, out.AlreadyApplied = prev.BytesWritten, true
				if !prev.Done {
					prev.Done = true
					_ = saveMarker(ws, marker, mustJSON(prev))
				}
				return marshal(out)
			}
			m.Offset = prev.Offset // not made: make it now, at the recorded size
		}
	}
	if err := saveMarker(ws, marker, mustJSON(m)); err != nil {
		return nil, fmt.Errorf("record the append marker (nothing was appended): %w", stripPath(err))
	}
	if _, err := f.Write(data); err != nil {
		return nil, fileErr("append to", userPath, err)
	}
	m.Done = true
	if err := saveMarker(ws, marker, mustJSON(m)); err != nil {
		// The data is there and the intent recorded: a retry finds it.
		return nil, fmt.Errorf("appended %d bytes to %q but could not record that it is done: %w", len(data), userPath, stripPath(err))
	}
	return marshal(out)
}

// appliedTo reports whether the append m records was made to f, now size
// bytes long: Done, or data at m.Offset. A file neither at m.Offset nor
// holding data there changed meanwhile: the outcome is unknown.
func (m writeMarker) appliedTo(f *os.File, size int64, data []byte) (bool, error) {
	if m.Done {
		return true, nil
	}
	if size == m.Offset {
		return false, nil
	}
	if size >= m.Offset+int64(len(data)) {
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, m.Offset); err == nil && bytes.Equal(got, data) {
			return true, nil
		}
	}
	return false, tool.OutcomeUnknown(fmt.Errorf("an earlier attempt of this call meant to append at byte %d of %q, and the file has changed since: it may or may not hold the append", m.Offset, m.Path))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// openAppend opens name in dir for appending, creating it if it does not
// exist. target is where name is, relative to the workspace root; the
// file opened must be one previewed (checkPreviewed).
func (w Workspace) openAppend(userPath string, ws, dir *confine.Dir, name, target string, previewed []policy.PreviewTarget) (*os.File, error) {
	// Read too: a retried append checks whether its data is there.
	f, real, err := dir.OpenFile(name, os.O_RDWR|os.O_APPEND|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// O_EXCL never follows a symlink: the new file is target itself.
		f, real, err = dir.OpenFile(name, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		return nil, fileErr("append to", userPath, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = fileErr("append to", userPath, err)
	case !fi.Mode().IsRegular():
		err = tool.Permanent(fmt.Errorf("append to %q: not a regular file", userPath))
	case real != target: // name became a symlink since it was checked
		if err = w.checkWrite(userPath, ws, real); err == nil {
			err = checkPreviewed(userPath, real, previewed)
		}
	}
	if err == nil {
		err = refuseHardLinks(userPath, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkWrite refuses to write rel, a path relative to the workspace root:
// toolgate's own MarkerDir, or a path Guard refuses.
func (w Workspace) checkWrite(userPath string, ws *confine.Dir, rel string) error {
	if rel == MarkerDir || strings.HasPrefix(rel, MarkerDir+"/") {
		return tool.Permanent(fmt.Errorf("write %q: %s is reserved for toolgate", userPath, MarkerDir))
	}
	return w.guard("write", userPath, ws, rel)
}

// checkPreviewed refuses to write file (relative to the workspace root)
// for userPath when a preview of the call showed that path leading to
// another file: a symlink on it was re-pointed, the file was replaced by a
// symlink, or a directory on the way by one, since the preview. A preview
// of another path (the agent's, before an approver edited it) says
// nothing about this one.
func checkPreviewed(userPath, file string, previewed []policy.PreviewTarget) error {
	for _, pin := range previewed {
		if filepath.Clean(pin.Path) != filepath.Clean(userPath) || pin.File == file {
			continue
		}
		if pin.File == "" {
			return tool.Permanent(fmt.Errorf("write %q: when the call was previewed this path led to no file of the workspace, and now it leads to %q; toolgate writes only the file a preview showed, so nothing was written", userPath, file))
		}
		return tool.Permanent(fmt.Errorf("write %q: the preview showed %q, but the path now leads to %q (a symlink on it changed since the preview); toolgate writes only the file the preview showed, so nothing was written", userPath, pin.File, file))
	}
	return nil
}

// refuseHardLinks refuses a regular file with more than one name: writing
// it in place would change it under its other names too, which may be
// outside the workspace; replacing it would silently cut it off from them.
func refuseHardLinks(userPath string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || st.Nlink <= 1 {
		return nil
	}
	return tool.Permanent(fmt.Errorf("write %q: the file has %d hard links, and toolgate does not write to a file that also has names elsewhere (possibly outside the workspace)", userPath, st.Nlink))
}

// saveMarker records an append marker under MarkerDir.
func saveMarker(ws *confine.Dir, name string, data []byte) error {
	if err := ws.MkdirAll(MarkerDir, 0o755); err != nil {
		return err
	}
	dir, err := ws.OpenDir(MarkerDir)
	if err != nil {
		return err
	}
	defer dir.Close()
	return atomicWrite(dir.Root(), name, data)
}

// atomicWrite replaces name in dir with data through a temporary file in
// dir, keeping the permissions of the file it replaces (0644 for a new
// one).
func atomicWrite(dir *os.Root, name string, data []byte) (err error) {
	mode := fs.FileMode(0o644)
	if fi, err := dir.Lstat(name); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	tmp := ".toolgate-tmp-" + rand.Text()
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = dir.Remove(tmp)
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
	return dir.Rename(tmp, name)
}

// open opens the workspace and resolves p in it (see Resolve), to a path
// relative to the root. Failures are permanent.
func (w Workspace) open(p string) (*confine.Dir, string, error) {
	ws, err := confine.Open(w.Root)
	if err != nil {
		return nil, "", tool.Permanent(err)
	}
	rel, err := ws.Resolve(p)
	if err != nil {
		ws.Close()
		return nil, "", tool.Permanent(err)
	}
	return ws, rel, nil
}

// guard asks Guard about rel (relative to the workspace root), where a
// tool is about to act; a refusal is permanent.
func (w Workspace) guard(op, userPath string, ws *confine.Dir, rel string) error {
	if w.Guard == nil {
		return nil
	}
	if err := w.Guard(ws.Abs(rel)); err != nil {
		return tool.Permanent(fmt.Errorf("%s %q: %w", op, userPath, err))
	}
	return nil
}

// decodeArgs decodes a call's arguments strictly; a failure is permanent.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return tool.Permanent(fmt.Errorf("decode arguments: %s", argsProblem(err)))
	}
	return nil
}

// argsProblem says what is wrong with arguments that did not decode, in
// JSON's terms: the model wrote JSON, not Go.
func argsProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "":
		return "the arguments must be a JSON object, not " + jsonValue(te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("argument %q must be %s, not %s", te.Field, jsonType(te.Type), jsonValue(te.Value))
	case errors.As(err, &se):
		return "the arguments are not valid JSON: " + se.Error()
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the arguments are not valid JSON: they end too soon"
	}
	return strings.TrimPrefix(err.Error(), "json: ") // e.g. unknown field "x"
}

// jsonValue names the JSON value an UnmarshalTypeError found: "array",
// "bool", "number 1.5", ...
func jsonValue(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "bool":
		return "a boolean"
	case "string", "number":
		return "a " + v
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	return v
}

// jsonType names the JSON type a Go type takes.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
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
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrExist) ||
		errors.Is(err, ErrOutsideWorkspace) || errors.Is(err, syscall.ENOTDIR) ||
		errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENXIO) {
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
