package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/confine"
	"github.com/toolgate/toolgate/policy"
)

// maxDiffedFile is the largest file write_file's preview diffs; a larger
// one is summarised.
const maxDiffedFile = 256 << 10

// previewWrite is write_file's preview: the unified diff of the file as
// it is (read through the confined workspace, as the tool will write it)
// and as the call leaves it. A new file is diffed against /dev/null; a
// binary or oversized file is summarised.
//
// The diff is of the file the path leads to now: a path that reaches it
// through a symlink (the file's or a directory's on the way) is shown as
// "link.txt -> target.txt" and diffed as target.txt. The preview records
// that file (Preview.Target), and the tool writes nothing else: it
// refuses if the path leads elsewhere when it runs.
func (w Workspace) previewWrite(_ context.Context, raw json.RawMessage) (policy.Preview, error) {
	var args struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if err := decodeArgs(raw, &args); err != nil {
		return policy.Preview{}, err
	}
	cannot := func(head string, err error) policy.Preview {
		return policy.Preview{Kind: policy.PreviewText, Text: head + "toolgate could not tell what this call will change: " + err.Error()}
	}
	ws, rel, err := w.open(args.Path)
	if err != nil {
		// Leads to no file of the workspace: the tool writes none either.
		p := cannot("", err)
		p.Target = &policy.PreviewTarget{Path: args.Path}
		return p, nil
	}
	defer ws.Close()
	target := &policy.PreviewTarget{Path: args.Path, File: rel, Link: w.throughLink(ws, args.Path, rel)}
	name, head := args.Path, ""
	if target.Link {
		name = rel
		head = fmt.Sprintf("%s -> %s (through a symlink): this call writes %s\n", args.Path, rel, rel)
	}
	var p policy.Preview
	old, size, exists, err := w.readForPreview(ws, rel, args.Path)
	switch {
	case err != nil:
		p = cannot(head, err)
	case size > maxDiffedFile:
		newSize := int64(len(args.Content))
		if args.Append {
			newSize += size
		}
		p = policy.Preview{Kind: policy.PreviewText,
			Text: fmt.Sprintf("%s%s: %d bytes now, %d bytes after this call (too large to diff)", head, name, size, newSize)}
	default:
		content := args.Content
		if args.Append {
			content = old + args.Content
		}
		p = policy.FileChange(name, old, content, exists)
		p.Text = head + p.Text
	}
	p.Target = target
	return p, nil
}

// throughLink says whether userPath reaches rel, where it really leads
// (relative to the workspace root), through a symlink: read by name alone,
// without following any link, it names another file.
func (w Workspace) throughLink(ws *confine.Dir, userPath, rel string) bool {
	named := userPath
	if !filepath.IsAbs(named) {
		named = filepath.Join(ws.Top(), named)
	}
	named = filepath.Clean(named)
	if r, inside := confine.Rel(ws.Top(), named); inside {
		return r != rel
	}
	// An absolute path through the workspace root's own symlink.
	if abs, err := filepath.Abs(w.Root); err == nil {
		if r, inside := confine.Rel(abs, named); inside {
			return r != rel
		}
	}
	return true
}

// readForPreview reads rel, a path of ws with no symlink, for a preview:
// at most maxDiffedFile bytes; exists is false when there is none. p is
// the path as the call names it, for errors.
func (w Workspace) readForPreview(ws *confine.Dir, rel, p string) (content string, size int64, exists bool, err error) {
	f, real, err := ws.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, stripPath(err))
	}
	defer f.Close()
	if real != rel {
		return "", 0, false, fmt.Errorf("read %q: the file changed into a symlink while it was previewed", p)
	}
	// A file the policy protects is not shown, even to an approver.
	if err := w.guard("read", p, ws, real); err != nil {
		return "", 0, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, stripPath(err))
	}
	if !fi.Mode().IsRegular() {
		return "", 0, false, fmt.Errorf("%q is not a regular file", p)
	}
	if fi.Size() > maxDiffedFile {
		return "", fi.Size(), true, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxDiffedFile+1))
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, stripPath(err))
	}
	return string(data), int64(len(data)), true, nil
}

// previewShell is shell's preview: the command, where and how it runs.
func (w Workspace) previewShell(_ context.Context, raw json.RawMessage) (policy.Preview, error) {
	var args struct {
		Command        string `json:"command"`
		TimeoutSeconds *int   `json:"timeout_seconds"`
	}
	if err := decodeArgs(raw, &args); err != nil {
		return policy.Preview{}, err
	}
	timeout := DefaultShellTimeout
	if args.TimeoutSeconds != nil {
		timeout = time.Duration(*args.TimeoutSeconds) * time.Second
	}
	root, err := w.root()
	if err != nil {
		return policy.Preview{}, err
	}
	return policy.Preview{Kind: policy.PreviewCommand,
		Text: fmt.Sprintf("$ %s\nin %s, with /bin/sh -c, killed after %s", args.Command, root, timeout)}, nil
}
