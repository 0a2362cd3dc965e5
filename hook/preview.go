package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/policy"
)

// maxPreviewFile is the largest file a preview diffs.
const maxPreviewFile = 256 << 10

// previewOf is what a tool use will change, built here, on the agent's
// machine, where its files are: Claude Code's Write and Edit as unified
// diffs of the file, NotebookEdit as the cell's new source, Codex's
// apply_patch as its patch. toolgate shows it as the agent's claim. nil
// for other tools, or when the file cannot be read (the call is asked
// without one).
//
// What holds is only what the file was when the hook looked: the agent
// writes the file itself, after the decision, through whatever its path
// leads to then. A file reached through a symlink is named with the file
// it leads to ("link.txt -> target.txt") and diffed as that file, but
// toolgate cannot keep the agent from writing elsewhere if the link is
// re-pointed after the preview (docs/coding-agents.md), unlike
// write_file, which toolgate runs.
func previewOf(ev Event) *policy.Preview {
	var in struct {
		FilePath     string  `json:"file_path"`
		Content      *string `json:"content"`
		OldString    string  `json:"old_string"`
		NewString    string  `json:"new_string"`
		ReplaceAll   bool    `json:"replace_all"`
		NotebookPath string  `json:"notebook_path"`
		NewSource    string  `json:"new_source"`
		EditMode     string  `json:"edit_mode"`
		Command      string  `json:"command"`
	}
	if json.Unmarshal(ev.ToolInput, &in) != nil {
		return nil
	}
	switch ev.ToolName {
	case "Write":
		if in.FilePath == "" || in.Content == nil {
			return nil
		}
		return fileDiff(ev.Cwd, in.FilePath, func(string) (string, error) { return *in.Content, nil })
	case "Edit":
		if in.FilePath == "" {
			return nil
		}
		return fileDiff(ev.Cwd, in.FilePath, func(old string) (string, error) {
			switch n := strings.Count(old, in.OldString); {
			case in.OldString == "" || n == 0:
				return "", errors.New("the text to replace is not in the file")
			case in.ReplaceAll:
				return strings.ReplaceAll(old, in.OldString, in.NewString), nil
			case n > 1:
				return "", fmt.Errorf("the text to replace is in the file %d times", n)
			}
			return strings.Replace(old, in.OldString, in.NewString, 1), nil
		})
	case "NotebookEdit":
		if in.NotebookPath == "" {
			return nil
		}
		mode := in.EditMode
		if mode == "" {
			mode = "replace"
		}
		return &policy.Preview{Kind: policy.PreviewText, Text: fmt.Sprintf("%s: %s a cell with:\n%s", in.NotebookPath, mode, in.NewSource)}
	case "apply_patch":
		if in.Command == "" {
			return nil
		}
		return &policy.Preview{Kind: policy.PreviewText, Text: in.Command}
	}
	return nil
}

// fileDiff diffs a file as it is and as change leaves it. A missing file
// is new; a binary or oversized one, or one change cannot apply to, gets
// a line saying so.
func fileDiff(cwd, name string, change func(old string) (string, error)) *policy.Preview {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	head := ""
	if real, ok := throughLink(cwd, name, path); ok {
		head = fmt.Sprintf("%s -> %s (through a symlink): the agent writes %s\n", name, real, real)
		name = real
	}
	text := func(s string) *policy.Preview { return &policy.Preview{Kind: policy.PreviewText, Text: head + s} }
	old, exists, err := readSmall(path)
	switch {
	case errors.Is(err, errTooLarge):
		return text(name + ": too large to diff")
	case err != nil:
		return text(fmt.Sprintf("%s: cannot be read here (%v)", name, err))
	}
	next, err := change(old)
	if err != nil {
		return text(fmt.Sprintf("%s: %v", name, err))
	}
	p := policy.FileChange(name, old, next, exists)
	p.Text = head + p.Text
	return &p
}

// throughLink returns the file path (name, as the tool use gives it,
// from cwd) leads to when a symlink on the way leads elsewhere than its
// name says: relative to cwd when it is below, else absolute.
func throughLink(cwd, name, path string) (string, bool) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", false // not there (a new file), or not readable: shown as named
	}
	base := cwd
	if r, err := filepath.EvalSymlinks(cwd); err == nil {
		base = r
	}
	named := filepath.Clean(name)
	if !filepath.IsAbs(named) {
		named = filepath.Join(base, named)
	}
	if real == named {
		return "", false
	}
	if rel, err := filepath.Rel(base, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return rel, true
	}
	return real, true
}

var errTooLarge = errors.New("too large")

// readSmall reads a regular file of at most maxPreviewFile bytes; exists
// is false when there is none.
func readSmall(path string) (content string, exists bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return "", false, err
	case !fi.Mode().IsRegular():
		return "", false, errors.New("not a regular file")
	case fi.Size() > maxPreviewFile:
		return "", true, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPreviewFile+1))
	if err != nil {
		return "", false, err
	}
	if len(b) > maxPreviewFile {
		return "", true, errTooLarge
	}
	return string(b), true, nil
}
