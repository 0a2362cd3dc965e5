package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	"github.com/toolgate/toolgate/visible"
)

// Kinds of Preview.
const (
	// PreviewDiff is a unified diff (--- a/PATH, +++ b/PATH, @@ hunks).
	PreviewDiff = "diff"
	// PreviewCommand is the command that will run, where, and why the
	// policy asks.
	PreviewCommand = "command"
	// PreviewText is anything else (a binary or oversized file, say).
	PreviewText = "text"
)

// Who computed a Preview.
const (
	ComputedByToolgate = "toolgate"
	// ComputedByAgent: the agent's claim, for a tool it runs on files
	// toolgate cannot read.
	ComputedByAgent = "agent"
)

// MaxPreviewBytes bounds a Preview's text.
const MaxPreviewBytes = 16 << 10

// MaxSandboxLine bounds the line a preview gives to how the call's
// process runs (SandboxGrant.Describe): a rule's grant longer than that
// is refused when the rules load.
const MaxSandboxLine = 2 << 10

// Preview is what a call will change, for the person who decides it.
type Preview struct {
	Kind       string `json:"kind"`
	Text       string `json:"text"`
	ComputedBy string `json:"computed_by"`
	Truncated  bool   `json:"truncated,omitempty"`
	// Target, in a preview of a file that toolgate will write, is the file
	// the preview was made on. The tool writes only that file: if the path
	// leads elsewhere by the time it runs (a symlink on it changed), it
	// refuses. Set by the tool's preview; nil for other previews and for
	// the agent's.
	Target *PreviewTarget `json:"target,omitempty"`
}

// PreviewTarget is the file a preview showed, as its path led when the
// preview was made.
type PreviewTarget struct {
	// Path is the path as the call's arguments name it.
	Path string `json:"path"`
	// File is the workspace file Path led to: relative to the workspace
	// root, with slashes, no symlinks. Empty when it led to no file of the
	// workspace (outside it, say): then nothing may be written there.
	File string `json:"file"`
	// Link says Path reaches File through a symlink (on the file itself
	// or a directory on the way).
	Link bool `json:"link,omitempty"`
}

// Bounded cuts the text to MaxPreviewBytes, at the end of a line where
// there is one, and marks it truncated.
func (p Preview) Bounded() Preview { return p.BoundedWith("") }

// BoundedWith is Bounded with tail appended whole after the cut, which
// leaves room for it: a line a person must see (how the call runs) that
// a long text cannot push out. tail is at most MaxSandboxLine bytes.
func (p Preview) BoundedWith(tail string) Preview {
	if limit := MaxPreviewBytes - len(tail); len(p.Text) > limit {
		cut := p.Text[:limit]
		if i := strings.LastIndexByte(cut, '\n'); i > 0 {
			cut = cut[:i+1]
		}
		for !utf8.ValidString(cut) { // a rune cut in two
			cut = cut[:len(cut)-1]
		}
		p.Text, p.Truncated = cut, true
	}
	p.Text += tail
	return p
}

// FileChange previews a file's change from old (its content; existed is
// false for a file that is not there yet) to new: a unified diff against
// a/PATH (or /dev/null, after a "new file PATH" line), or a line saying
// the content is binary or unchanged.
func FileChange(path, old, new string, existed bool) Preview {
	if !isText(old) || !isText(new) {
		return Preview{Kind: PreviewText, Text: fmt.Sprintf("%s: binary content, %d bytes now, %d bytes after this call", path, len(old), len(new))}
	}
	from := "a/" + path
	if !existed {
		from = "/dev/null"
	}
	diff := udiff.Unified(from, "b/"+path, old, new)
	switch {
	case diff == "":
		return Preview{Kind: PreviewText, Text: path + ": no change (the file already holds this content)"}
	case !existed:
		diff = "new file " + path + "\n" + diff
	}
	return Preview{Kind: PreviewDiff, Text: diff}
}

func isText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Heading names what the preview shows, for a heading, saying when the
// agent computed it (its claim) and when its text holds characters a
// screen would obey or hide (shown escaped by visible.Text).
func (p Preview) Heading() string {
	h := "Preview"
	switch p.Kind {
	case PreviewDiff:
		h = "What it changes"
	case PreviewCommand:
		h = "What it runs"
	}
	if p.ComputedBy == ComputedByAgent {
		h += " (computed by the agent)"
	}
	if note := visible.Note(p.Text); note != "" {
		h += " " + note
	}
	return h
}
