package analytics

import (
	"fmt"
	"slices"
	"strings"
)

// contextLines is how many unchanged lines a hunk shows around a change.
const contextLines = 3

// op is one line of a diff: kept (' '), removed ('-') or added ('+').
type op struct {
	kind byte
	text string
	// a and b are the line's numbers (1-based) in the old and new text.
	a, b int
}

// unified is the unified diff of a and b (lines without their ends) as
// diff -u and git write it, with name in both headers (a/name, b/name:
// `git apply` or `patch -p1` in the file's directory applies it).
// noEOL: neither text ends with a newline.
func unified(name string, a, b []string, noEOL bool) string {
	if noEOL && len(a) > 0 && len(b) > 0 {
		// The last lines differ from every other line by their missing
		// end, so each is marked: one kept must be last on both sides.
		a, b = slices.Clone(a), slices.Clone(b)
		a[len(a)-1] += noNewline
		b[len(b)-1] += noNewline
	}
	ops := diffLines(a, b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- a/%s\n+++ b/%s\n", name, name)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from contextLines before this change to contextLines
		// after the last change that is at most 2*contextLines away.
		start := max(0, i-contextLines)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*contextLines {
				break
			}
		}
		stop := min(len(ops), end+contextLines+1)
		writeHunk(&out, ops[start:stop])
		i = stop
	}
	return out.String()
}

// noNewline marks, while diffing, a last line without its end.
const noNewline = "\x00no newline"

func writeHunk(out *strings.Builder, ops []op) {
	aStart, bStart, aLen, bLen := 0, 0, 0, 0
	for _, o := range ops {
		if o.kind != '+' {
			if aLen == 0 {
				aStart = o.a
			}
			aLen++
		}
		if o.kind != '-' {
			if bLen == 0 {
				bStart = o.b
			}
			bLen++
		}
	}
	// An empty side names the line before it, as diff -u does.
	if aLen == 0 {
		aStart = ops[0].a - 1
	}
	if bLen == 0 {
		bStart = ops[0].b - 1
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
	for _, o := range ops {
		text, cut := strings.CutSuffix(o.text, noNewline)
		out.WriteByte(o.kind)
		out.WriteString(text)
		out.WriteByte('\n')
		if cut {
			out.WriteString("\\ No newline at end of file\n")
		}
	}
}

func hunkRange(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// diffLines lines a up with b: the common head and tail are kept, and
// the middle (one rule's lines, for a suggestion) is aligned by its
// longest common subsequence.
func diffLines(a, b []string) []op {
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	var ops []op
	for i := range head {
		ops = append(ops, op{' ', a[i], i + 1, i + 1})
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	// lcs[i][j] is the length of the longest common subsequence of
	// ma[i:] and mb[j:].
	lcs := make([][]int, len(ma)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(mb)+1)
	}
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			ops = append(ops, op{' ', ma[i], head + i + 1, head + j + 1})
			i, j = i+1, j+1
		case i < len(ma) && (j == len(mb) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', ma[i], head + i + 1, head + j + 1})
			i++
		default:
			ops = append(ops, op{'+', mb[j], head + i + 1, head + j + 1})
			j++
		}
	}
	for k := range tail {
		ops = append(ops, op{' ', a[len(a)-tail+k], len(a) - tail + k + 1, len(b) - tail + k + 1})
	}
	return ops
}
