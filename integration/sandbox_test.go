package integration

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/sandbox"
)

// sandboxPolicy asks a person about every shell command and lets the
// file tools run; the marker line is the file's secret.
const sandboxPolicy = `# policy-marker-%s
default: ask
rules:
  - {name: echo, tool: echo, action: allow}
  - {name: reads, tool: read_file, action: allow}
  - {name: writes, tool: write_file, action: allow}
`

// sandboxDev is one toolgate dev whose shell calls a person approves
// through the API, with the files a command must not reach: dev's own
// (keys, ledger key, tokens, door key, databases), its policy file (in a
// directory of its own) and a .bashrc in a directory that stands for the
// user's home.
type sandboxDev struct {
	*devEnv
	agent, approver string // dev's tokens
	policyFile      string
	home            string
	bashrc          string // .bashrc's content as written
	seq             int
}

// startSandboxDev starts toolgate dev with env added to its environment
// and flags added to its arguments.
func startSandboxDev(t *testing.T, env []string, flags ...string) *sandboxDev {
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(fmt.Sprintf(sandboxPolicy, rand.Text())), 0o600))
	s := &sandboxDev{policyFile: policyFile, home: t.TempDir(), bashrc: "alias gs='git status' # bashrc-marker-" + rand.Text() + "\n"}
	require.NoError(t, os.WriteFile(filepath.Join(s.home, ".bashrc"), []byte(s.bashrc), 0o600))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.workspace = filepath.Join(d.dataDir, "workspace")
	d.dev = startIn(t, "", env, devReady, append([]string{"dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--policy", policyFile}, flags...)...)
	s.devEnv = d
	s.agent, s.approver = d.devTokens()
	return s
}

// api calls dev's HTTP API with token.
func (s *sandboxDev) api(t *testing.T, token string) apiClient {
	return apiClient{t: t, base: "http://" + s.httpAddr, token: token}
}

// shellEnd is how a shell call ended.
type shellEnd struct {
	status, reason string
	exitCode       int
	stdout, stderr string
}

// text is the command's whole output.
func (e shellEnd) text() string { return e.stdout + e.stderr }

func (e shellEnd) String() string {
	return fmt.Sprintf("status %s, exit %d, reason %q\nstdout: %s\nstderr: %s", e.status, e.exitCode, e.reason, e.stdout, e.stderr)
}

// shell submits command as a shell call, has the approver approve it once
// it waits, and returns how it ended.
func (s *sandboxDev) shell(t *testing.T, command string) shellEnd {
	t.Helper()
	s.seq++
	id := fmt.Sprintf("sbx-%d", s.seq)
	agent, approver := s.api(t, s.agent), s.api(t, s.approver)
	r := agent.do("POST", "/v1/calls?wait=200ms", map[string]any{"session": "sandbox", "tool": "shell", "call_id": id,
		"args": map[string]any{"command": command, "timeout_seconds": 300}})
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Eventually(t, func() bool { return agent.do("GET", "/v1/calls/"+id, nil).body["status"] == "pending" },
		30*time.Second, 20*time.Millisecond, "call %s never waited for a person", id)
	r = approver.do("POST", "/v1/calls/"+id+"/decision", map[string]any{"decision": "approve"})
	require.Equal(t, http.StatusOK, r.status, r.raw)
	deadline := time.Now().Add(6 * time.Minute)
	for {
		r = agent.do("GET", "/v1/calls/"+id+"?wait=20s", nil)
		if st, _ := r.body["status"].(string); st == "ok" || st == "error" || st == "denied" || st == "timed_out" || st == "unknown" {
			break
		}
		require.True(t, time.Now().Before(deadline), "call %s did not end: %s", id, r.raw)
	}
	e := shellEnd{}
	e.status, _ = r.body["status"].(string)
	e.reason, _ = r.body["reason"].(string)
	if out, ok := r.body["output"].(map[string]any); ok {
		code, _ := out["exit_code"].(float64)
		e.exitCode = int(code)
		e.stdout, _ = out["stdout"].(string)
		e.stderr, _ = out["stderr"].(string)
	}
	return e
}

// secretWords are the runs of 16 or more key-like characters in a file:
// its keys, tokens and markers, any of which in a command's output is a
// leak.
func secretWords(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	words := regexp.MustCompile(`[A-Za-z0-9+/=_-]{16,}`).FindAllString(string(data), -1)
	require.NotEmpty(t, words, "%s holds a secret to look for", file)
	return words
}

// leaked returns the first secret word of any of files found in out.
func leaked(t *testing.T, out string, files ...string) string {
	t.Helper()
	for _, f := range files {
		for _, w := range secretWords(t, f) {
			if strings.Contains(out, w) {
				return filepath.Base(f) + ": " + w
			}
		}
	}
	return ""
}

// TestSandbox runs approved shell calls on three devs: sandboxed (this
// kernel's Landlock), unsandboxed (--unsandboxed-tools, the control), and
// one told the kernel has no Landlock. The control's worker is told so
// too: --unsandboxed-tools is what runs commands where nothing can be
// confined, and the same commands reach everything there, so the escape
// tests can fail.
func TestSandbox(t *testing.T) {
	require.Positive(t, sandbox.ABI(), "this test needs a kernel with Landlock")
	sb := startSandboxDev(t, nil)
	open := startSandboxDev(t, []string{sandbox.NoLandlockVar + "=1"}, "--unsandboxed-tools")
	none := startSandboxDev(t, []string{sandbox.NoLandlockVar + "=1"})

	data := func(s *sandboxDev, name string) string { return filepath.Join(s.dataDir, name) }
	secrets := func(s *sandboxDev) []string {
		return []string{data(s, "keys.json"), data(s, "ledger.key"), data(s, "tokens.json"), data(s, "door-key.json")}
	}

	t.Run("the worker says how tools run", func(t *testing.T) {
		for s, line := range map[*sandboxDev]string{sb: "Tools run sandboxed", open: "Tools run UNSANDBOXED", none: "This kernel offers no Landlock"} {
			assert.Eventually(t, func() bool { return strings.Contains(s.dev.out.String(), line) }, 10*time.Second, 50*time.Millisecond,
				"%q in dev's output:\n%s", line, s.dev.out)
		}
	})

	// Reads: each names the files it reads, relative to the workspace,
	// which cat and python name again when refused.
	reads := []struct {
		name    string
		command func(s *sandboxDev) string
		files   func(s *sandboxDev) []string
		refused []string // what the refusal names in the output
	}{
		{"toolgate's keys, ledger key, tokens and door key",
			func(*sandboxDev) string {
				return "cat ../keys.json; cat ../ledger.key; cat ../tokens.json; cat ../door-key.json"
			},
			secrets, []string{"../keys.json: Permission denied", "../ledger.key: Permission denied", "../tokens.json: Permission denied", "../door-key.json: Permission denied"}},
		{"the policy file, by its absolute path",
			func(s *sandboxDev) string { return "cat " + s.policyFile },
			func(s *sandboxDev) []string { return []string{s.policyFile} }, []string{"policy.yaml: Permission denied"}},
		{"the user's home",
			func(s *sandboxDev) string { return "cat " + filepath.Join(s.home, ".bashrc") },
			func(s *sandboxDev) []string { return []string{filepath.Join(s.home, ".bashrc")} }, []string{".bashrc: Permission denied"}},
		{"from a child shell",
			func(*sandboxDev) string { return "sh -c 'cat ../keys.json; cat ../tokens.json'" },
			secrets, []string{"../keys.json: Permission denied", "../tokens.json: Permission denied"}},
		{"from python",
			func(*sandboxDev) string {
				return `python3 -c 'import sys; sys.stdout.write(open("../keys.json").read())'; python3 -c 'import sys; sys.stdout.write(open("../ledger.key").read())'`
			},
			secrets, []string{"PermissionError", "Permission denied: '../keys.json'", "Permission denied: '../ledger.key'"}},
		{"through a symlink in the workspace",
			func(*sandboxDev) string { return "ln -sf ../keys.json keys-link && cat keys-link" },
			secrets, []string{"keys-link: Permission denied"}},
	}
	for _, c := range reads {
		t.Run("reads "+c.name, func(t *testing.T) {
			e := sb.shell(t, c.command(sb))
			require.Equal(t, "ok", e.status, "%s", e)
			assert.NotZero(t, e.exitCode, "%s", e)
			for _, r := range c.refused {
				assert.Contains(t, e.text(), r, "refused by the kernel")
			}
			assert.Empty(t, leaked(t, e.text(), c.files(sb)...), "nothing leaks: %s", e)

			ctl := open.shell(t, c.command(open))
			require.Equal(t, "ok", ctl.status, "%s", ctl)
			assert.NotEmpty(t, leaked(t, ctl.text(), c.files(open)...), "the control leaks: %s", ctl)
		})
	}

	t.Run("searching the disk", func(t *testing.T) {
		const find = "find / -name keys.json 2>/dev/null"
		e := sb.shell(t, find)
		require.Equal(t, "ok", e.status, "%s", e)
		assert.NotZero(t, e.exitCode, "find met directories it may not read: %s", e)
		assert.NotContains(t, e.text(), data(sb, "keys.json"))
		assert.Empty(t, leaked(t, e.text(), secrets(sb)...))

		ctl := open.shell(t, find)
		require.Equal(t, "ok", ctl.status, "%s", ctl)
		assert.Contains(t, ctl.text(), data(open, "keys.json"), "the control finds it")
	})

	t.Run("appending to the databases", func(t *testing.T) {
		marker := "appended-" + rand.Text()
		dbs := []string{"ledger.db", "temporal.db"}
		before := map[string]int64{}
		for _, db := range dbs {
			fi, err := os.Stat(data(sb, db))
			require.NoError(t, err)
			before[db] = fi.Size()
		}
		e := sb.shell(t, fmt.Sprintf("echo %[1]s >> ../ledger.db; echo %[1]s >> ../temporal.db; sh -c 'echo %[1]s >> ../ledger.db'", marker))
		require.Equal(t, "ok", e.status, "%s", e)
		assert.NotZero(t, e.exitCode, "%s", e)
		assert.Contains(t, e.stderr, "../ledger.db: Permission denied")
		assert.Contains(t, e.stderr, "../temporal.db: Permission denied")
		for _, db := range dbs {
			// dev writes its databases itself, so their sizes may grow;
			// the marker must not be in them.
			b, err := os.ReadFile(data(sb, db))
			require.NoError(t, err)
			assert.NotContains(t, string(b), marker, db)
			t.Logf("%s: %d bytes before, %d after", db, before[db], len(b))
		}

		// The control only opens them for appending, writing nothing: its
		// dev goes on serving from them.
		ctl := open.shell(t, ": >> ../ledger.db && : >> ../temporal.db && echo opened-both")
		require.Equal(t, "ok", ctl.status, "%s", ctl)
		assert.Contains(t, ctl.stdout, "opened-both", "the control may write them: %s", ctl)
	})

	t.Run("writing the user's home", func(t *testing.T) {
		rc := filepath.Join(sb.home, ".bashrc")
		e := sb.shell(t, fmt.Sprintf(`echo evil >> %[1]s; sh -c 'echo evil >> %[1]s'; python3 -c 'open("%[1]s", "a").write("evil")'`, rc))
		require.Equal(t, "ok", e.status, "%s", e)
		assert.NotZero(t, e.exitCode, "%s", e)
		assert.Contains(t, e.stderr, ".bashrc: Permission denied")
		assert.Contains(t, e.stderr, "PermissionError")
		got, err := os.ReadFile(rc)
		require.NoError(t, err)
		assert.Equal(t, sb.bashrc, string(got), "untouched")

		rc = filepath.Join(open.home, ".bashrc")
		ctl := open.shell(t, fmt.Sprintf(`echo evil >> %[1]s; sh -c 'echo evil >> %[1]s'; python3 -c 'open("%[1]s", "a").write("evil")'`, rc))
		require.Equal(t, "ok", ctl.status, "%s", ctl)
		got, err = os.ReadFile(rc)
		require.NoError(t, err)
		assert.Equal(t, open.bashrc+"evil\nevil\nevil", string(got), "the control writes it")
	})

	// The worker is the sandbox helper's parent, as workerPIDCommand finds
	// it; unsandboxed, the command's own parent.
	t.Run("signalling or reading the worker", func(t *testing.T) {
		const probe = "cat /proc/$w/environ | tr '\\0' '\\n' | grep -c '^PATH=' && echo read-environ; " +
			"kill -0 $w && echo could-signal; grep -E '^CapEff' /proc/self/status"
		e := sb.shell(t, "w=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status); "+probe+"; kill -9 $w || echo not-killed")
		require.Equal(t, "ok", e.status, "%s", e)
		assert.NotContains(t, e.stdout, "read-environ", "%s", e)
		assert.Contains(t, e.stderr, "Permission denied", "%s", e)
		assert.NotContains(t, e.stdout, "could-signal", "%s", e)
		assert.Contains(t, e.stdout, "not-killed", "%s", e)
		assert.Contains(t, e.stdout, "CapEff:\t0000000000000000", "no capabilities: %s", e)
		assert.Equal(t, "ok", sb.shell(t, "echo alive").status, "the worker lives on")

		ctl := open.shell(t, "w=$PPID; "+probe)
		require.Equal(t, "ok", ctl.status, "%s", ctl)
		assert.Contains(t, ctl.stdout, "read-environ", "the control reads it: %s", ctl)
		assert.Contains(t, ctl.stdout, "could-signal", "the control could signal it: %s", ctl)
	})

	t.Run("ordinary work runs sandboxed", func(t *testing.T) {
		ws := sb.workspace
		write := func(name, content string) {
			require.NoError(t, os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644))
		}
		write("in.txt", "hello sandbox\n")
		write("Makefile", "out.txt: in.txt\n\ttr a-z A-Z < in.txt > out.txt\n\t@echo made\n")
		write("script.py", `import os, tempfile
text = open("in.txt").read()
with tempfile.NamedTemporaryFile("w", delete=False) as f:
    f.write(text)
open("py-out.txt", "w").write(text[::-1])
print("python wrote", os.path.getsize(f.name), "bytes in", os.path.dirname(f.name))
`)
		write("script.js", `const fs = require("fs"), os = require("os"), path = require("path");
const text = fs.readFileSync("in.txt", "utf8");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "node-"));
fs.writeFileSync(path.join(dir, "copy.txt"), text);
fs.writeFileSync("node-out.txt", text.length + "\n");
console.log("node wrote", fs.readFileSync(path.join(dir, "copy.txt"), "utf8").length);
`)
		for _, c := range []struct{ name, command, want string }{
			{"git", "git init -q && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && " +
				"echo f > f.txt && git add f.txt && git -c user.email=a@b -c user.name=a commit -q -m f && git log --oneline | wc -l", "2\n"},
			{"make", "make", "made\n"},
			{"python3", "python3 script.py", "python wrote 14 bytes in "},
			{"node", "node script.js", "node wrote 14\n"},
			{"ls /usr/bin", "ls /usr/bin", "\nenv\n"},
		} {
			e := sb.shell(t, c.command)
			require.Equal(t, "ok", e.status, "%s: %s", c.name, e)
			assert.Equal(t, 0, e.exitCode, "%s: %s", c.name, e)
			assert.Contains(t, e.stdout, c.want, "%s: %s", c.name, e)
		}
		for name, want := range map[string]string{"out.txt": "HELLO SANDBOX\n", "py-out.txt": "\nxobdnas olleh", "node-out.txt": "14\n"} {
			got, err := os.ReadFile(filepath.Join(ws, name))
			require.NoError(t, err, name)
			assert.Equal(t, want, string(got), name)
		}
		_, err := os.Stat(filepath.Join(ws, ".git", "HEAD"))
		assert.NoError(t, err, "git made its repository in the workspace")
	})

	t.Run("without Landlock the shell refuses, the rest runs", func(t *testing.T) {
		e := none.shell(t, "echo hi")
		assert.Equal(t, "error", e.status, "%s", e)
		assert.Contains(t, e.reason, "no Landlock")
		assert.Contains(t, e.reason, "--unsandboxed-tools")
		assert.Empty(t, e.stdout)

		agent := none.api(t, none.agent)
		r := agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "no-landlock", "tool": "echo", "args": map[string]any{"x": 1}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"], r.raw)
		r = agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "no-landlock", "tool": "write_file", "args": map[string]any{"path": "note.txt", "content": "still here"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "ok", r.body["status"], r.raw)
		r = agent.do("POST", "/v1/calls?wait=30s", map[string]any{"session": "no-landlock", "tool": "read_file", "args": map[string]any{"path": "note.txt"}})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		assert.Equal(t, "still here", r.body["output"].(map[string]any)["content"], r.raw)
		status, body := getJSON(t, "http://"+none.httpAddr+"/v1/tools", none.agent)
		assert.Equal(t, http.StatusOK, status, "%v", body)
	})

	t.Run("without Landlock --unsandboxed-tools runs the shell", func(t *testing.T) {
		e := open.shell(t, "echo hi")
		require.Equal(t, "ok", e.status, "%s", e)
		assert.Equal(t, "hi\n", e.stdout)
	})
}
