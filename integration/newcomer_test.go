package integration

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A newcomer follows the README and docs/coding-agents.md word for word,
// from a directory of their own, with toolgate on the PATH: every command
// works as written and prints what the docs show.

// docCommand is one `$ command` of a console block, with the output the
// doc shows after it.
type docCommand struct {
	line string
	want []string
}

// consoleCommands returns the commands of the console blocks of doc
// between the headings from and to.
func consoleCommands(t *testing.T, doc, from, to string) []docCommand {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", doc))
	require.NoError(t, err)
	text := string(raw)
	i, j := strings.Index(text, from), strings.Index(text, to)
	require.True(t, i >= 0 && j > i, "%s has %q before %q", doc, from, to)
	var cmds []docCommand
	in := false
	sc := bufio.NewScanner(strings.NewReader(text[i:j]))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```console"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && strings.HasPrefix(line, "$ "):
			cmds = append(cmds, docCommand{line: strings.TrimPrefix(line, "$ ")})
		case in && len(cmds) > 0:
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, line)
		}
	}
	require.NotEmpty(t, cmds)
	return cmds
}

// shownLine normalises a line of output so that a doc's line and the real
// one compare: spacing collapsed, times, ages and ledger indexes masked.
// A doc line with "…" shows only a part, and is not compared.
var (
	maskTime  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	maskAge   = regexp.MustCompile(`\b\d+(ms|s|m|h)\b`)
	maskIndex = regexp.MustCompile(`^#\d+\b`)
)

func shownLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = maskTime.ReplaceAllString(s, "TIME")
	s = maskAge.ReplaceAllString(s, "AGE")
	return maskIndex.ReplaceAllString(s, "#N")
}

// showsLine matches a printed line against a doc's: equal, where the
// doc's "…" stands for any text.
func showsLine(doc string) func(string) bool {
	parts := strings.Split(shownLine(doc), "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(strings.TrimSpace(p))
	}
	re := regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`)
	return func(printed string) bool { return re.MatchString(printed) }
}

func TestTheREADMEWalkthroughWorksAsWritten(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7233", "127.0.0.1:7700"} {
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err, "the README's walkthrough uses toolgate dev's default ports; %s is taken", addr)
		ln.Close()
	}
	home := t.TempDir()
	bin := filepath.Join(home, "go", "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.Symlink(binary, filepath.Join(bin, "toolgate")))
	demo := filepath.Join(home, "toolgate-demo")
	require.NoError(t, os.MkdirAll(demo, 0o755))
	env := []string{"HOME=" + home, "PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin",
		"TOOLGATE_KEYS=", "TOOLGATE_API=", "TOOLGATE_TOKEN=", "XDG_STATE_HOME=" + filepath.Join(home, "state")}

	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "mkdir -p ~/toolgate-demo && cd ~/toolgate-demo\ntoolgate dev\n", "the walkthrough starts toolgate dev in a directory of the reader's")
	dev := startIn(t, demo, env, devReady, "dev")
	assert.Contains(t, dev.out.String(), "tokens     created in "+filepath.Join(demo, ".toolgate", "tokens.json"))

	run := func(line string) (int, string) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = demo
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, string(out)
	}
	for _, c := range consoleCommands(t, "README.md", "## Five-minute walkthrough", "### The web inbox") {
		code, out := run(c.line)
		shows := strings.Join(c.want, "\n")
		switch {
		case code == 5 && strings.Contains(c.line, "--wait"):
			code = 0 // documented: still waiting when --wait ran out
		case code == 3 && strings.Contains(shows, `"status": "denied"`):
			code = 0 // documented: denied
		}
		require.Equal(t, 0, code, "README: $ %s\n%s", c.line, out)
		var got []string
		for _, l := range strings.Split(out, "\n") {
			got = append(got, shownLine(l))
		}
		for _, w := range c.want {
			if strings.TrimSpace(w) == "" || strings.HasPrefix(strings.TrimSpace(w), "{") || strings.HasPrefix(w, "  ") && strings.Contains(w, "\": ") {
				continue // JSON, shown in part
			}
			assert.True(t, slices.ContainsFunc(got, showsLine(w)), "README: $ %s\nshows %q; it printed:\n%s", c.line, w, out)
		}
	}

	// docs/coding-agents.md: the printed settings are the ones it shows,
	// printed from the project directory, and the token line it gives
	// works from there.
	project := filepath.Join(home, "shop")
	require.NoError(t, os.MkdirAll(project, 0o755))
	code, out := run("cd " + project + " && toolgate hook claude-code --print-settings 2>/dev/null")
	require.Equal(t, 0, code, out)
	printed := out
	agents, err := os.ReadFile(filepath.Join("..", "docs", "coding-agents.md"))
	require.NoError(t, err)
	shown := regexp.MustCompile("(?s)In short:\n\n```json\n(.*?)```").FindSubmatch(agents)
	require.NotNil(t, shown, "coding-agents.md shows the settings")
	var doc, real struct {
		Hooks map[string][]json.RawMessage `json:"hooks"`
	}
	require.NoError(t, json.Unmarshal(shown[1], &doc))
	require.NoError(t, json.Unmarshal([]byte(printed), &real))
	for event, matchers := range doc.Hooks {
		require.Len(t, real.Hooks[event], len(matchers), event)
		for i := range matchers {
			assert.JSONEq(t, string(matchers[i]), string(real.Hooks[event][i]), "coding-agents.md's %s hook is what --print-settings prints", event)
		}
	}
	tokenLine := regexp.MustCompile("(?m)^export TOOLGATE_TOKEN=.*$").Find(agents)
	require.NotNil(t, tokenLine)
	code, out = run("cd " + project + " && " + string(tokenLine) + ` && curl -sf -H "Authorization: Bearer $TOOLGATE_TOKEN" -d '{"session":"from-shop","tool":"echo","args":{"hi":1}}' 'http://127.0.0.1:7700/v1/calls?wait=20s'`)
	require.Equal(t, 0, code, "the agent token reaches toolgate from the project: %s", out)
	assert.Contains(t, out, `"status":"ok"`)
}
