package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/toolgate/toolgate/visible"
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
		via = visible.Line(ra.Via)
	}
	fmt.Fprintf(w, "the tool ran anyway: %s approved it at %s after %s (recorded %s by %s)\n",
		ra.User, via, ended, ra.At.UTC().Format("2006-01-02T15:04:05Z"), ra.Requester)
	fmt.Fprintf(w, "  it ran with: %s\n", compactJSON(ra.Args))
	switch {
	case ra.Error != "":
		fmt.Fprintf(w, "  it failed: %s\n", visible.Line(ra.Error))
	case ra.Withheld != "":
		fmt.Fprintf(w, "  output: withheld: %s\n", visible.Line(ra.Withheld))
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
		return visible.Line(string(raw))
	}
	return visible.JSON(b.String())
}
