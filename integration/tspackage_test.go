package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The TypeScript package (clients/typescript, @toolgate/client) as a user
// gets it: from a fresh checkout, without the node_modules a developer may
// have there, packed with `npm pack` and installed from the tarball, and
// installed from the repository path, each into an app of its own; then
// its own `npm install && npm test`.
//
// Nothing is downloaded to install the package itself: it has no
// dependencies (the frameworks are optional peers), so both installs run
// with --offline and an empty npm cache of their own. The app's
// frameworks, which a user installs beside it, are linked from the npm
// folder scripts/test fills (TOOLGATE_NPM_DIR), as frameworks_test.go
// does. The package's own `npm install` needs its devDependencies
// (TypeScript and the frameworks' types, about 150 packages): it runs with
// --prefer-offline against npm's own cache, which scripts/test's install
// of the same pinned versions filled, so it reads the cache and reaches the
// registry only for what the cache lacks (the machines reach npm, as
// scripts/test's install does). --offline there would fail on any machine
// whose npm cache was emptied after the TOOLGATE_NPM_DIR install.

// tsEntries are the functions each entry point must export (a new entry
// point must export at least one function).
var tsEntries = map[string][]string{
	"@toolgate/client":                  {"Toolgate", "deriveCallId", "forModel", "isFinal", "traceHeaders"},
	"@toolgate/client/ai-sdk":           {"approvalResponses", "gateTools", "toolgateApproval"},
	"@toolgate/client/openai-agents":    {"gateTools", "resolveInterruptions"},
	"@toolgate/client/langgraph":        {"gateTools", "resumeCommand"},
	"@toolgate/client/claude-agent-sdk": {"awaitDeferred", "toolgateOptions"},
}

// tsPackageJSON is what a publisher reads in package.json.
type tsPackageJSON struct {
	Name    string                       `json:"name"`
	Version string                       `json:"version"`
	Private *bool                        `json:"private"`
	License string                       `json:"license"`
	Engines map[string]string            `json:"engines"`
	Exports map[string]map[string]string `json:"exports"`
	Deps    map[string]string            `json:"dependencies"`
}

func readTSPackageJSON(t *testing.T, path string) tsPackageJSON {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var p tsPackageJSON
	require.NoError(t, json.Unmarshal(data, &p), path)
	return p
}

// specifier is the import of an export's subpath ("." or "./ai-sdk").
func specifier(name, subpath string) string {
	if subpath == "." {
		return name
	}
	return name + strings.TrimPrefix(subpath, ".")
}

func TestTypeScriptPackage(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "this test needs node (scripts/test installs Debian's nodejs)")
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "this test needs npm (scripts/test installs Debian's npm)")
	tsc := npmFile(t, ".bin/tsc") // fails the test, saying how to install, when the npm software is missing

	src, err := filepath.Abs(filepath.Join("..", "clients", "typescript"))
	require.NoError(t, err)
	manifest := readTSPackageJSON(t, filepath.Join(src, "package.json"))
	readme, err := os.ReadFile(filepath.Join(src, "README.md"))
	require.NoError(t, err, "the package has a README for npm")

	step(t, "package.json is ready to publish", func(t *testing.T) {
		assert.Equal(t, "@toolgate/client", manifest.Name)
		assert.Regexp(t, `^\d+\.\d+\.\d+`, manifest.Version)
		assert.Nil(t, manifest.Private, "a private package cannot be published")
		// No license is chosen yet: UNLICENSED until the owners choose one.
		assert.Equal(t, "UNLICENSED", manifest.License)
		assert.Equal(t, ">=20", manifest.Engines["node"])
		assert.Empty(t, manifest.Deps, "the client has no runtime dependencies; the frameworks are optional peers")
		for subpath := range manifest.Exports {
			assert.Contains(t, string(readme), "`"+specifier(manifest.Name, subpath)+"`", "the README names the entry point %s", subpath)
		}
		for spec := range tsEntries {
			assert.Contains(t, manifest.Exports, "."+strings.TrimPrefix(spec, manifest.Name), "package.json exports %s", spec)
		}
	})

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("default: ask\nrules:\n  - {name: deploys, tool: deploy, action: ask, message: a deploy needs a person}\n"), 0o600))
	d := &devEnv{t: t, dataDir: t.TempDir(), port: freePort(t), httpAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	d.dev = start(t, devReady, "dev", "--data-dir", d.dataDir, "--temporal-port", fmt.Sprint(d.port),
		"--http", d.httpAddr, "--tokens", writeTokensFile(t, t.TempDir()), "--policy", policy)
	base := "http://" + d.httpAddr
	bob := apiClient{t: t, base: base, token: "token-bob"}

	checkout := freshTSCheckout(t, src)
	var tarball string
	dest := t.TempDir() // the tarball outlives the step that packs it
	step(t, "npm pack makes a tarball of what the exports name, and nothing of the tests", func(t *testing.T) {
		out := runNpm(t, npm, checkout, nil, "pack", "--json", "--pack-destination", dest)
		var packed []struct {
			Filename string `json:"filename"`
			Files    []struct {
				Path string `json:"path"`
			} `json:"files"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &packed), out)
		require.Len(t, packed, 1, out)
		tarball = filepath.Join(dest, packed[0].Filename)
		require.FileExists(t, tarball)
		files := map[string]bool{}
		for _, f := range packed[0].Files {
			files[f.Path] = true
			assert.False(t, strings.HasPrefix(f.Path, "test/") || strings.HasPrefix(f.Path, "node_modules/") || strings.HasPrefix(f.Path, "scripts/"),
				"%s is not for users", f.Path)
		}
		assert.True(t, files["package.json"] && files["README.md"], "package.json and README.md ship: %v", files)
		for subpath, targets := range manifest.Exports {
			for cond, target := range targets {
				assert.True(t, files[strings.TrimPrefix(target, "./")], "exports[%q].%s is %s, which the tarball lacks", subpath, cond, target)
			}
		}
	})

	// An app of one's own: installs the package with an empty npm cache and
	// no network, then gets the frameworks it uses.
	app := func(t *testing.T, install ...string) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"my-agent","version":"1.0.0","private":true,"type":"module"}`), 0o644))
		runNpm(t, npm, dir, nil, append([]string{"install", "--offline", "--cache", t.TempDir(), "--no-audit", "--no-fund"}, install...)...)
		installed := filepath.Join(dir, "node_modules", "@toolgate", "client")
		info, err := os.Lstat(installed)
		require.NoError(t, err, "npm installed @toolgate/client")
		require.Zero(t, info.Mode()&fs.ModeSymlink, "installed as a copy, so the adapters import the app's frameworks")
		got := readTSPackageJSON(t, filepath.Join(installed, "package.json"))
		assert.Equal(t, manifest.Version, got.Version)
		assert.Equal(t, manifest.Exports, got.Exports)
		linkNpmModules(t, filepath.Join(dir, "node_modules"))
		return dir
	}

	uses := func(t *testing.T, dir, session string) {
		// Every entry point imports and has its functions; gate() puts a
		// tool behind a real toolgate: the call waits for bob, runs once
		// with what he approved, and is reported.
		program := `
import { readFileSync } from 'node:fs';
import { Toolgate, deriveCallId, forModel } from '@toolgate/client';
const pkg = JSON.parse(readFileSync('node_modules/@toolgate/client/package.json', 'utf8'));
const entries = {};
for (const subpath of Object.keys(pkg.exports)) {
  const spec = subpath === '.' ? pkg.name : pkg.name + subpath.slice(1);
  const m = await import(spec);
  entries[spec] = Object.keys(m).filter((k) => typeof m[k] === 'function').sort();
}
const session = process.env.SESSION;
const tg = new Toolgate({ url: process.env.TOOLGATE_URL, token: 'token-agent-1', pollSeconds: 1 });
const outcome = await tg.gate({ session, tool: 'deploy', args: { service: 'web' }, toolCallId: 'call-1' },
  async (args) => 'deployed:' + args.service);
console.log(JSON.stringify({ entries, derived: await deriveCallId(session, 'call-1'), outcome: { callId: outcome.callId, status: outcome.status, ran: outcome.ran, output: outcome.output }, model: forModel(outcome) }));
`
		t.Setenv("SESSION", session)
		callID := frameworkCallID(session, "call-1")
		out := runApproving(t, node, dir, base, program, callID, bob)
		var got struct {
			Entries map[string][]string `json:"entries"`
			Derived string              `json:"derived"`
			Outcome map[string]any      `json:"outcome"`
			Model   any                 `json:"model"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		var specs []string
		for subpath := range manifest.Exports {
			specs = append(specs, specifier(manifest.Name, subpath))
		}
		sort.Strings(specs)
		var imported []string
		for spec, fns := range got.Entries {
			imported = append(imported, spec)
			assert.NotEmpty(t, fns, "%s exports functions", spec)
			for _, fn := range tsEntries[spec] {
				assert.Contains(t, fns, fn, "%s exports %s", spec, fn)
			}
		}
		sort.Strings(imported)
		assert.Equal(t, specs, imported, "every entry point imports")
		assert.Equal(t, callID, got.Derived, "deriveCallId is the documented SHA-256 derivation")
		assert.Equal(t, map[string]any{"callId": callID, "status": "ok", "ran": true, "output": "deployed:web"}, got.Outcome)
		assert.Contains(t, fmt.Sprint(got.Model), "deployed:web")
		res := bob.do("GET", "/v1/calls/"+callID, nil)
		assert.Equal(t, "ok", res.body["status"], res.raw)
		assert.Equal(t, "bob", res.body["decided_by"], res.raw)
		assert.Contains(t, fmt.Sprint(res.body["output"]), "deployed:web", "the run was reported")

		// A TypeScript app finds the declarations of every entry point
		// (strict: an import without types is an error).
		var ts strings.Builder
		for i, spec := range specs {
			fmt.Fprintf(&ts, "import * as m%d from '%s';\nvoid m%d;\n", i, spec, i)
		}
		ts.WriteString("import { Toolgate, deriveCallId, type GateOutcome } from '@toolgate/client';\n" +
			"const tg: Toolgate = new Toolgate({ url: 'http://127.0.0.1:7700', token: 't' });\n" +
			"const id: Promise<string> = deriveCallId('s', 'c');\n" +
			"export const run: Promise<GateOutcome<string>> = tg.gate({ session: 's', tool: 'deploy', args: {} }, async () => 'ok');\n" +
			"void id;\n")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "app.ts"), []byte(ts.String()), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(`{"compilerOptions":{"strict":true,"noEmit":true,"target":"es2022","module":"nodenext","moduleResolution":"nodenext","lib":["es2022","dom"],"types":["node"],"skipLibCheck":true},"files":["app.ts"]}`), 0o644))
		cmd := exec.Command(tsc, "-p", "tsconfig.json")
		cmd.Dir = dir
		out2, err := cmd.CombinedOutput()
		require.NoError(t, err, "tsc in the app:\n%s", out2)
	}

	step(t, "installed from the tarball, offline, every entry point works in an app", func(t *testing.T) {
		require.NotEmpty(t, tarball)
		uses(t, app(t, tarball), "tspkg-tarball")
	})

	step(t, "installed from the repository path, offline, every entry point works in an app", func(t *testing.T) {
		// --install-links installs a copy, as docs/frameworks.md says.
		uses(t, app(t, "--install-links", checkout), "tspkg-path")
	})

	step(t, "npm install && npm test pass on their own in a fresh checkout", func(t *testing.T) {
		fresh := freshTSCheckout(t, src)
		runNpm(t, npm, fresh, nil, "install", "--prefer-offline", "--no-audit", "--no-fund")
		require.FileExists(t, filepath.Join(fresh, "node_modules", ".bin", "tsc"), "TypeScript is a devDependency")
		// No npm folder of scripts/test's to fall back on: the type check
		// uses the package's own node_modules.
		none := t.TempDir()
		out := runNpm(t, npm, fresh, []string{"TOOLGATE_NPM_DIR=" + none, "XDG_CACHE_HOME=" + none}, "test")
		assert.Regexp(t, `(?m)^ok \d+ - the declarations type-check with TypeScript$`, out)
		assert.Regexp(t, `(?m)^# fail 0$`, out)
		assert.Regexp(t, `(?m)^# skipped 0$`, out)
	})
}

// freshTSCheckout copies the package as a fresh clone has it: without what
// its .gitignore keeps out (node_modules, a lockfile, tarballs), beside
// ../../server/openapi.json, which its drift test reads.
func freshTSCheckout(t *testing.T, src string) string {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, "clients", "typescript")
	require.NoError(t, filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if e.Name() == "node_modules" || e.Name() == "package-lock.json" || strings.HasSuffix(e.Name(), ".tgz") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	}))
	openapi, err := os.ReadFile(filepath.Join(src, "..", "..", "server", "openapi.json"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "server"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "server", "openapi.json"), openapi, 0o644))
	return dst
}

// linkNpmModules gives an app the npm folder's packages (the frameworks)
// that it has not installed itself.
func linkNpmModules(t *testing.T, modules string) {
	t.Helper()
	entries, err := os.ReadDir(npmModules())
	require.NoError(t, err)
	link := func(src, dst string) {
		if _, err := os.Lstat(dst); err == nil {
			return
		}
		require.NoError(t, os.Symlink(src, dst))
	}
	for _, e := range entries {
		src := filepath.Join(npmModules(), e.Name())
		if e.Name() == ".bin" || e.Name() == ".package-lock.json" {
			continue
		}
		if !strings.HasPrefix(e.Name(), "@") {
			link(src, filepath.Join(modules, e.Name()))
			continue
		}
		scoped, err := os.ReadDir(src)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(modules, e.Name()), 0o755))
		for _, s := range scoped {
			link(filepath.Join(src, s.Name()), filepath.Join(modules, e.Name(), s.Name()))
		}
	}
}

// runNpm runs npm in dir and returns its standard output; it fails the
// test with both outputs when npm fails.
func runNpm(t *testing.T, npm, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "npm_config_update_notifier=false", "npm_config_loglevel=error"), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "npm %s in %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), dir, &stdout, &stderr)
	return stdout.String()
}
