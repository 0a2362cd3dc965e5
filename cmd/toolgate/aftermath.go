package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/toolgate/toolgate/workflows"
)

// printRanAfterEnd prints, for a call that ended denied or timed out, that
// its tool ran anyway and what it did (Result.RanAfterEnd). What the agent
// reported is shown with control and format characters escaped.
func printRanAfterEnd(w io.Writer, ra *workflows.RanAfterEnd) {
	if ra == nil {
		return
	}
	ended := "it was denied"
	if ra.CallStatus == workflows.StatusTimedOut {
		ended = "it timed out"
	} else if ra.DecidedBy != "" {
		ended = "it was denied by " + ra.DecidedBy
	}
	via := "the agent's own prompt"
	if ra.Via != "" {
		via = escapeInvisible(ra.Via)
	}
	fmt.Fprintf(w, "the tool ran anyway: %s approved it at %s after %s (recorded %s by %s)\n",
		ra.User, via, ended, ra.At.UTC().Format("2006-01-02T15:04:05Z"), ra.Requester)
	fmt.Fprintf(w, "  it ran with: %s\n", compactJSON(ra.Args))
	switch {
	case ra.Error != "":
		fmt.Fprintf(w, "  it failed: %s\n", escapeInvisible(ra.Error))
	case len(ra.Output) > 0:
		fmt.Fprintf(w, "  output: %s\n", compactJSON(ra.Output))
	default:
		fmt.Fprintln(w, "  output: not reported")
	}
}

// compactJSON is raw JSON on one line: no whitespace outside strings, so
// no raw carriage return or tab; inside strings JSON escapes them.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return escapeInvisible(string(raw))
	}
	return escapeInvisible(b.String())
}

// escapeInvisible shows every rune a terminal would not print as itself
// (control, format and bidi characters) as a \u escape.
func escapeInvisible(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsGraphic(r) && !unicode.Is(unicode.Bidi_Control, r) {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}
