package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
)

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPI, &doc))
	for _, r := range (&api{}).table() {
		ops, ok := doc.Paths[r.pattern]
		require.True(t, ok, "openapi.json lacks %s", r.pattern)
		assert.Contains(t, ops, strings.ToLower(r.method), "openapi.json lacks %s %s", r.method, r.pattern)
	}
}

func TestEveryAPIRouteNeedsAToken(t *testing.T) {
	h := New(Config{Tokens: mustTokens(t)})
	for _, r := range (&api{}).table() {
		path := strings.NewReplacer("{call_id}", "c1", "{session}", "s1", "{tool}", "shell").Replace(r.pattern)
		for _, auth := range []string{"", "Bearer wrong-token", "Basic abc"} {
			req := httptest.NewRequest(r.method, path, strings.NewReader(`{}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			assert.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s with %q", r.method, path, auth)
			assert.Contains(t, rec.Body.String(), `"code":"unauthorized"`)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "the API document needs no token")
}

func TestRolesAreCheckedBeforeAnythingElse(t *testing.T) {
	h := New(Config{Tokens: mustTokens(t)})
	cases := []struct {
		token, method, path string
	}{
		{"agent-token", "POST", "/v1/calls/c1/decision"},
		{"agent-token", "POST", "/v1/decisions"},
		{"agent-token", "GET", "/v1/pending"},
		{"agent-token", "POST", "/v1/sessions/s1/end"},
		{"approver-token", "POST", "/v1/calls"},
	}
	for _, c := range cases {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(`{"decision":"approve"}`))
		req.Header.Set("Authorization", "Bearer "+c.token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusForbidden, rec.Code, "%s %s with %s", c.method, c.path, c.token)
		assert.Contains(t, rec.Body.String(), "needs role")
	}
}

func mustTokens(t *testing.T) *Tokens {
	tokens, err := NewTokens([]TokenEntry{
		{Name: "agent-1", Role: RoleAgent, SHA256: HashToken("agent-token")},
		{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}, SHA256: HashToken("approver-token")},
	})
	require.NoError(t, err)
	return tokens
}

func TestTokensFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(good, []byte("tokens:\n  - name: alice\n    role: approver\n    groups: [ops]\n    sha256: "+HashToken("s3cret")+"\n"), 0o600))
	tokens, err := LoadTokens(good)
	require.NoError(t, err)
	p, ok := tokens.Lookup("s3cret")
	require.True(t, ok)
	assert.Equal(t, Principal{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}}, p)
	_, ok = tokens.Lookup("S3CRET")
	assert.False(t, ok)

	owned := filepath.Join(dir, "owned.yaml")
	require.NoError(t, os.WriteFile(owned, []byte("tokens:\n  - name: claude\n    role: agent\n    owner: dana\n    sha256: "+HashToken("agent")+"\n"), 0o600))
	tokens, err = LoadTokens(owned)
	require.NoError(t, err)
	p, _ = tokens.Lookup("agent")
	assert.Equal(t, Principal{Name: "claude", Role: RoleAgent, Owner: "dana"}, p, "the agent's owner is the person running it")

	for name, tc := range map[string]struct{ body, want string }{
		"unknown field":     {"tokens:\n  - name: a\n    role: agent\n    token: plain\n", "field token not found"},
		"bad role":          {"tokens:\n  - name: a\n    role: root\n    sha256: " + HashToken("x") + "\n", "not agent, approver, admin or auditor"},
		"bad hash":          {"tokens:\n  - name: a\n    role: agent\n    sha256: abc\n", "64 hex characters"},
		"owner of approver": {"tokens:\n  - name: a\n    role: approver\n    owner: dana\n    sha256: " + HashToken("x") + "\n", "owner is for agent tokens"},
		"owner is agent":    {"tokens:\n  - name: a\n    role: agent\n    owner: a\n    sha256: " + HashToken("x") + "\n", "owner names the agent itself"},
		"bad owner":         {"tokens:\n  - name: a\n    role: agent\n    owner: \"dana smith\"\n    sha256: " + HashToken("x") + "\n", "owner"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o600))
		_, err := LoadTokens(path)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
}

func TestDevTokensAreKeptAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first, tokens, created, err := LoadOrCreateDevTokens(dir)
	require.NoError(t, err)
	assert.True(t, created)
	info, err := os.Stat(filepath.Join(dir, "tokens.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	p, ok := tokens.Lookup(first.Approver)
	require.True(t, ok)
	assert.Equal(t, RoleApprover, p.Role)

	again, _, created, err := LoadOrCreateDevTokens(dir)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, first, again)
}

func TestDecisionRequestMapping(t *testing.T) {
	alice := Principal{Name: "alice", Role: RoleApprover}
	cases := []struct {
		req     decisionRequest
		want    policy.DecisionKind
		wantErr string
	}{
		{decisionRequest{Decision: "approve"}, policy.Approved, ""},
		{decisionRequest{Decision: "approve", Args: json.RawMessage(`{"path":"b"}`)}, policy.ApprovedWithEdits, ""},
		{decisionRequest{Decision: "approve_for_session"}, policy.ApprovedForSession, ""},
		{decisionRequest{Decision: "deny"}, policy.Denied, ""},
		{decisionRequest{Decision: "deny", Reason: "no"}, policy.DeniedWithReason, ""},
		{decisionRequest{Decision: "deny_always"}, policy.DeniedAlways, ""},
		{decisionRequest{Decision: "yes"}, 0, "decision must be"},
		{decisionRequest{Decision: "deny", Args: json.RawMessage(`{}`)}, 0, "args edited arguments go with"},
		{decisionRequest{Decision: "approve", Args: json.RawMessage(`[1]`)}, 0, "args must be a JSON object"},
	}
	for _, c := range cases {
		d, err := c.req.toDecision(alice, "api")
		if c.wantErr != "" {
			assert.ErrorContains(t, err, c.wantErr)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, d.Kind)
		assert.Equal(t, "alice", d.DecidedBy, "the decider comes from the token")
	}
}

func TestMayDecide(t *testing.T) {
	ops := Principal{Name: "a", Role: RoleApprover, Groups: []string{"ops"}}
	all := Principal{Name: "b", Role: RoleApprover, Groups: []string{"*"}}
	agent := Principal{Name: "c", Role: RoleAgent}
	assert.True(t, ops.mayDecide(nil))
	assert.True(t, ops.mayDecide([]string{"finance", "ops"}))
	assert.False(t, ops.mayDecide([]string{"finance"}))
	assert.True(t, all.mayDecide([]string{"finance"}))
	assert.False(t, agent.mayDecide(nil))
	assert.True(t, Principal{Role: RoleAdmin}.mayDecide([]string{"x"}))
}

func TestTokenNamesFollowTheIdentifierRule(t *testing.T) {
	for _, name := range []string{"a\x00b", "\xff", "a b", "a#b", strings.Repeat("n", 10000)} {
		_, err := NewTokens([]TokenEntry{{Name: name, Role: RoleAgent, SHA256: HashToken("t")}})
		require.Error(t, err, "%q", name)
		assert.True(t, strings.HasPrefix(err.Error(), "token 1: name must be"), err.Error())
	}
}

func TestNoAgentTokenMayActAsToolgateItself(t *testing.T) {
	_, err := NewTokens([]TokenEntry{{Name: "toolgate", Role: RoleAgent, SHA256: HashToken("t")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the name is toolgate's own")
}

func TestMarshalTokensLoadsBack(t *testing.T) {
	entries := []TokenEntry{
		{Name: "root", Role: RoleAdmin, SHA256: HashToken("t1")},
		{Name: "dev-approver", Role: RoleApprover, Groups: []string{"*"}, SHA256: HashToken("t2")},
		{Name: "ci:bot", Role: RoleAgent, SHA256: HashToken("t3")},
		{Name: "alice@example.com", Role: RoleApprover, Groups: []string{"ops", "#oncall", "a: b", "- x", "&anchor", "!tag", "[x]", "{y}", "yes", "null", "'q'", `"dq"`, " pad "}, SHA256: HashToken("t4")},
	}
	file, err := MarshalTokens(entries...)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	tokens, err := LoadTokens(path)
	require.NoError(t, err, "%s", file)
	for i, e := range entries {
		p, ok := tokens.Lookup("t" + strconv.Itoa(i+1))
		require.True(t, ok, e.Name)
		assert.Equal(t, Principal{Name: e.Name, Role: e.Role, Groups: e.Groups}, p, "%s", file)
	}
}

func TestToolgatesOwnNamesAreReservedForEveryRoleAndAsOwners(t *testing.T) {
	for _, name := range policy.ReservedNames {
		for _, e := range []TokenEntry{
			{Name: name, Role: RoleAgent},
			{Name: name, Role: RoleApprover, Groups: []string{"nobody"}},
			{Name: strings.ToUpper(name[:1]) + name[1:], Role: RoleAdmin},
			{Name: "agent-a", Role: RoleAgent, Owner: name},
		} {
			e.SHA256 = HashToken("t")
			_, err := NewTokens([]TokenEntry{e})
			require.Error(t, err, "%+v", e)
			assert.Contains(t, err.Error(), "reserved", "%+v", e)
		}
	}
}

func TestOneNameIsOnePrincipal(t *testing.T) {
	_, err := NewTokens([]TokenEntry{
		{Name: "agentA", Role: RoleAgent, SHA256: HashToken("a")},
		{Name: "agentA", Role: RoleApprover, Groups: []string{"ops"}, SHA256: HashToken("b")},
	})
	require.Error(t, err)
	assert.Equal(t, `token "agentA": the name is listed twice as different principals (agent and approver of groups ops); one name is one principal: give each its own name`, err.Error())

	_, err = NewTokens([]TokenEntry{
		{Name: "alice", Role: RoleApprover, Groups: []string{"ops"}, SHA256: HashToken("a")},
		{Name: "alice", Role: RoleApprover, Groups: []string{"finance"}, SHA256: HashToken("b")},
	})
	require.Error(t, err, "other groups: another principal")

	_, err = NewTokens([]TokenEntry{
		{Name: "agentA", Role: RoleAgent, SHA256: HashToken("a")},
		{Name: "agentB", Role: RoleAgent, Owner: "agentA", SHA256: HashToken("b")},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `owner "agentA" is an agent token's name`)

	tokens, err := NewTokens([]TokenEntry{
		{Name: "alice", Role: RoleApprover, Groups: []string{"ops", "finance"}, SHA256: HashToken("a")},
		{Name: "alice", Role: RoleApprover, Groups: []string{"finance", "ops"}, SHA256: HashToken("a2")},
		{Name: "agentA", Role: RoleAgent, Owner: "alice", SHA256: HashToken("b")},
	})
	require.NoError(t, err, "a second token of the same principal (rotation), and an owner who is an approver")
	p, ok := tokens.Lookup("a2")
	require.True(t, ok)
	assert.Equal(t, "alice", p.Name)
}
