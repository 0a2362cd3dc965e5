package rules

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// passkeyPolicy has a passkey rule at line 7 (its passkey: at line 10)
// beside a plain ask rule.
const passkeyPolicy = `
default: ask
rules:
  - name: reads
    tool: read_file
    action: allow
  - name: pay
    tool: pay
    action: ask
    passkey: true
    groups: [finance]
  - name: write
    tool: write_file
    action: ask
`

var withPublicURL = Options{PublicURL: "https://toolgate.example.com"}

func TestPasskeyRules(t *testing.T) {
	p := parse(t, passkeyPolicy, withPublicURL)

	v := p.Evaluate(call("pay", `{"amount": 5}`))
	require.NotNil(t, v.Request)
	assert.True(t, v.Request.Passkey, "every approval of a pay call needs a passkey")
	assert.Equal(t, []string{"finance"}, v.Request.Groups)
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"passkey":true`, "policy eval shows it")

	v = p.Evaluate(call("write_file", `{}`))
	require.NotNil(t, v.Request)
	assert.False(t, v.Request.Passkey, "a rule without passkey: true needs none")
	raw, err = json.Marshal(v)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "passkey")

	v = p.Evaluate(call("other", `{}`))
	require.NotNil(t, v.Request)
	assert.False(t, v.Request.Passkey, "nor does the default, unless it says so")

	raw, err = json.Marshal(mustApproval(t, p, "pay"))
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"passkey":true`, "the request the workflow stores says so")
}

func mustApproval(t *testing.T, p *Policy, tool string) any {
	t.Helper()
	req, err := p.EvaluateApproval(t.Context(), call(tool, `{}`))
	require.NoError(t, err)
	require.NotNil(t, req)
	return req
}

func TestPasskeyOnTheDefault(t *testing.T) {
	p := parse(t, "default: {action: ask, passkey: true}\n", withPublicURL)
	v := p.Evaluate(call("anything", `{}`))
	require.NotNil(t, v.Request)
	assert.True(t, v.Request.Passkey)

	p = parse(t, "default: {action: ask, passkey: false}\n")
	assert.False(t, p.Evaluate(call("anything", `{}`)).Request.Passkey)
}

// A call a rule could not judge is never approved with less than a rule
// that might have judged it needs.
func TestPasskeyOnUnjudgedCalls(t *testing.T) {
	p := parse(t, `
rules:
  - name: big
    tool: pay
    when: args.amount > 500
    action: deny
    reason: too much
  - name: pay
    tool: pay
    action: ask
    passkey: true
  - name: shell
    tool: shell
    when: args.command == "ls"
    action: allow
`, withPublicURL)
	v := p.Evaluate(call("pay", `{}`)) // no amount: the deny rule fails
	require.Equal(t, ActionAsk, v.Action)
	assert.Equal(t, "big", v.Rule)
	assert.True(t, v.Request.Passkey, "the pay rule would need a passkey")

	v = p.Evaluate(call("shell", `{}`))
	require.Equal(t, ActionAsk, v.Action)
	assert.Equal(t, "shell", v.Rule)
	assert.False(t, v.Request.Passkey, "no passkey rule covers shell")
}

func TestPasskeyNeedsAPublicURL(t *testing.T) {
	_, err := Parse("policy.yaml", []byte(passkeyPolicy), Options{})
	require.Error(t, err)
	assert.Equal(t, `policy.yaml:10: rule "pay": passkey: true needs a public URL: passkeys are bound to the host people open toolgate at; `+
		`start toolgate with --public-url https://HOST (browsers refuse an IP address as a passkey's relying party)`, err.Error())

	_, err = Parse("policy.yaml", []byte("default:\n  action: ask\n  passkey: true\n"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "policy.yaml:3: default: passkey: true needs a public URL")

	// Without a passkey rule no public URL is needed.
	_, err = Parse("policy.yaml", []byte("rules: [{name: pay, tool: pay, action: ask, passkey: false}]\n"), Options{})
	assert.NoError(t, err)
}

func TestPasskeyPublicURLs(t *testing.T) {
	for _, u := range []string{
		"https://toolgate.example.com",
		"https://toolgate.example.com:8443/",
		"http://localhost:8080",
		"http://LOCALHOST:8080",
		"http://toolgate.localhost",
		"https://localhost",
	} {
		_, err := Parse("policy.yaml", []byte(passkeyPolicy), Options{PublicURL: u})
		assert.NoError(t, err, u)
	}
	for u, want := range map[string]string{
		"http://127.0.0.1:7700": `policy.yaml:10: rule "pay": passkey: true needs a public URL with a host name, not the IP address 127.0.0.1 (--public-url http://127.0.0.1:7700): ` +
			`browsers refuse an IP address as a passkey's relying party; start toolgate with --public-url https://HOST`,
		"https://10.0.0.7":        "not the IP address 10.0.0.7",
		"https://[::1]:7700":      "not the IP address ::1",
		"https://[fe80::1%25en0]": "not the IP address fe80::1%en0",
		"https://127.1":           "not the IP address 127.1",
		"https://10.0.0.0x7":      "not the IP address 10.0.0.0x7",
		"http://toolgate.example.com": `policy.yaml:10: rule "pay": passkey: true needs an https public URL, not --public-url http://toolgate.example.com: ` +
			`browsers offer passkeys only on secure pages (https, or http://localhost); start toolgate with --public-url https://HOST`,
		"toolgate.example.com":       `passkey: true needs a public URL such as https://HOST, not --public-url "toolgate.example.com"`,
		"ftp://toolgate.example.com": `not --public-url "ftp://toolgate.example.com"`,
	} {
		_, err := Parse("policy.yaml", []byte(passkeyPolicy), Options{PublicURL: u})
		require.Error(t, err, u)
		assert.Contains(t, err.Error(), want, u)
		assert.Contains(t, err.Error(), `rule "pay"`, u)
	}
	// A host name that merely has digits is a host name.
	_, err := Parse("policy.yaml", []byte(passkeyPolicy), Options{PublicURL: "https://tg1.example.com"})
	assert.NoError(t, err)
	// An IP public URL is fine for a file without passkey rules.
	_, err = Parse("policy.yaml", []byte("default: ask\n"), Options{PublicURL: "http://127.0.0.1:7700"})
	assert.NoError(t, err)
}

func TestPasskeyRefusedWith(t *testing.T) {
	for name, tc := range map[string]struct{ src, want string }{
		"user": {`
rules:
  - name: pay
    tool: pay
    action: ask
    user: true
    passkey: true
`, `test.yaml:7: rule "pay": passkey: true cannot go with user: true; the person running the agent decides in the agent's own client, where no passkey can be asked for`},
		"user on the default": {"default: {action: ask, user: true, passkey: true}\n",
			`test.yaml:1: default: passkey: true cannot go with user: true`},
		"allow": {"rules: [{name: pay, tool: pay, action: allow, passkey: true}]\n",
			`test.yaml:1: rule "pay": passkey is only for ask rules`},
		"deny": {"rules: [{name: pay, tool: pay, action: deny, reason: no, passkey: true}]\n",
			`test.yaml:1: rule "pay": passkey is only for ask rules`},
		"on_timeout allow": {`
rules:
  - name: pay
    tool: pay
    action: ask
    passkey: true
    on_timeout: allow
`, `test.yaml:7: rule "pay": on_timeout: allow would approve at the deadline, with no passkey, a call whose every approval needs one (passkey: true)`},
		"not a boolean": {"rules: [{name: pay, tool: pay, action: ask, passkey: yes please}]\n",
			`test.yaml:1: rule "pay": passkey must be true or false`},
	} {
		_, err := Parse("test.yaml", []byte(tc.src), withPublicURL)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
	// Four eyes and passkeys go together: each approval needs one.
	p := parse(t, "rules: [{name: pay, tool: pay, action: ask, groups: [a, b], approvals: 2, passkey: true}]\n", withPublicURL)
	v := p.Evaluate(call("pay", `{}`))
	assert.Equal(t, 2, v.Request.Approvals)
	assert.True(t, v.Request.Passkey)
}

func TestPasskeyExplained(t *testing.T) {
	p := parse(t, passkeyPolicy, withPublicURL)
	raw, err := json.Marshal(p.Explain())
	require.NoError(t, err)
	var rs []map[string]any
	require.NoError(t, json.Unmarshal(raw, &rs))
	byName := map[string]map[string]any{}
	for _, r := range rs {
		byName[r["name"].(string)] = r
	}
	assert.Equal(t, true, byName["pay"]["passkey"], "explain --json: %s", raw)
	assert.NotContains(t, byName["write"], "passkey")
	assert.NotContains(t, byName["reads"], "passkey")
	assert.NotContains(t, byName[RuleDefault], "passkey")
}

// `toolgate policy check`, `eval` and `explain` do not know the worker's
// public URL: a passkey rule is taken there, and checked against one if
// given.
func TestPasskeyAwayFromTheWorker(t *testing.T) {
	p, err := Parse("policy.yaml", []byte(passkeyPolicy), CheckOptions(""))
	require.NoError(t, err)
	assert.True(t, p.Evaluate(call("pay", `{}`)).Request.Passkey)

	opts := CheckOptions("")
	opts.PublicURL = "http://127.0.0.1:7700"
	_, err = Parse("policy.yaml", []byte(passkeyPolicy), opts)
	assert.ErrorContains(t, err, "not the IP address 127.0.0.1")
}

// A reload loads the file with the options the Reloader was made with.
func TestPasskeyReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "default: ask\n")
	r, err := NewReloader(path, withPublicURL, nil)
	require.NoError(t, err)
	writeFile(t, path, passkeyPolicy)
	require.NoError(t, r.Reload())
	assert.True(t, r.Evaluate(call("pay", `{}`)).Request.Passkey)

	writeFile(t, path, "default: ask\n")
	r, err = NewReloader(path, Options{}, nil)
	require.NoError(t, err)
	writeFile(t, path, passkeyPolicy)
	err = r.Reload()
	require.ErrorContains(t, err, `policy.yaml:10: rule "pay": passkey: true needs a public URL`)
	assert.ErrorContains(t, err, "--public-url")
	assert.Equal(t, ActionAsk, r.Evaluate(call("pay", `{}`)).Action)
	assert.False(t, r.Evaluate(call("pay", `{}`)).Request.Passkey, "the last good file keeps serving")
}
