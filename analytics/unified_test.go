package analytics

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every diff unified writes, applied by patch(1) without fuzz, turns the
// old text into the new one: random texts, random edits, with and
// without a final newline.
func TestUnifiedDiffsApplyWithPatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	words := []string{"rules:", "  - name: a", "    action: ask", "", "    tool: x", "# comment", "  - {name: b}"}
	for n := range 150 {
		var a []string
		for range 1 + rng.IntN(40) {
			a = append(a, words[rng.IntN(len(words))])
		}
		b := append([]string(nil), a...)
		for range 1 + rng.IntN(4) {
			i := rng.IntN(len(b) + 1)
			switch rng.IntN(3) {
			case 0:
				b = append(b[:i], append([]string{fmt.Sprintf("new %d", rng.IntN(5))}, b[i:]...)...)
			case 1:
				if i < len(b) && len(b) > 1 {
					b = append(b[:i], b[i+1:]...)
				}
			default:
				if i < len(b) {
					b[i] = "changed"
				}
			}
		}
		noEOL := n%3 == 0
		if noEOL && (a[len(a)-1] == "" || b[len(b)-1] == "") {
			continue // a text without a final newline ends in a line that is not empty
		}
		text := func(lines []string) string {
			s := strings.Join(lines, "\n")
			if !noEOL {
				s += "\n"
			}
			return s
		}
		if text(a) == text(b) {
			continue
		}
		file := filepath.Join(dir, "f.yaml")
		require.NoError(t, os.WriteFile(file, []byte(text(a)), 0o600))
		d := unified("f.yaml", a, b, noEOL)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f.diff"), []byte(d), 0o600))
		cmd := exec.Command("patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", "f.diff")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "case %d: %s\n%s", n, out, d)
		got, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Equal(t, text(b), string(got), "case %d:\n%s", n, d)
		require.NotContains(t, string(out), "offset", "case %d: the hunks' line numbers are right\n%s", n, d)
	}
}
