package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// maxDiffedFile is the largest file write_file's preview diffs; a larger
// one is summarised.
const maxDiffedFile = 256 << 10

// previewWrite is write_file's preview: the unified diff of the file as
// it is (read through the confined workspace, as the tool will write it)
// and as the call leaves it. A new file is diffed against /dev/null; a
// binary or oversized file is summarised.
func (w Workspace) previewWrite(_ context.Context, raw json.RawMessage) (policy.Preview, error) {
	var args struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Append  bool   `json:"append"`
	}
	if err := decodeArgs(raw, &args); err != nil {
		return policy.Preview{}, err
	}
	old, size, exists, err := w.readForPreview(args.Path)
	if err != nil {
		return policy.Preview{}, err
	}
	if size > maxDiffedFile {
		newSize := int64(len(args.Content))
		if args.Append {
			newSize += size
		}
		return policy.Preview{Kind: policy.PreviewText,
			Text: fmt.Sprintf("%s: %d bytes now, %d bytes after this call (too large to diff)", args.Path, size, newSize)}, nil
	}
	content := args.Content
	if args.Append {
		content = old + args.Content
	}
	return policy.FileChange(args.Path, old, content, exists), nil
}

// readForPreview reads a workspace file for a preview, at most
// maxDiffedFile bytes; exists is false when there is none.
func (w Workspace) readForPreview(p string) (content string, size int64, exists bool, err error) {
	ws, rel, err := w.open(p)
	if err != nil {
		return "", 0, false, err
	}
	defer ws.Close()
	f, real, err := ws.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, err)
	}
	defer f.Close()
	// A file the policy protects is not shown, even to an approver.
	if err := w.guard("read", p, ws, real); err != nil {
		return "", 0, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return "", 0, false, fmt.Errorf("%q is not a regular file", p)
	}
	if fi.Size() > maxDiffedFile {
		return "", fi.Size(), true, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxDiffedFile+1))
	if err != nil {
		return "", 0, false, fmt.Errorf("read %q: %w", p, err)
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
