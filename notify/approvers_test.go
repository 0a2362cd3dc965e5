package notify_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
)

const approversYAML = `approvers:
  - {name: alice, groups: [ops], slack_user: U_ALICE, email: alice@example.com}
  - {name: bob, groups: [finance], slack_user: U_BOB, email: Bob@Example.com}
  - name: carol
    groups: ["*"]
    slack_user: U0CAROL
  - {name: dave, email: dave@example.com}
`

func writeApprovers(t *testing.T, content string) string {
	path := filepath.Join(t.TempDir(), "approvers.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestLoadApprovers(t *testing.T) {
	a, err := notify.LoadApprovers(writeApprovers(t, approversYAML))
	require.NoError(t, err)
	require.Len(t, a.All(), 4)

	alice, ok := a.BySlackUser("U_ALICE")
	require.True(t, ok)
	assert.Equal(t, "alice", alice.Name)
	assert.Equal(t, []string{"ops"}, alice.Groups)
	_, ok = a.BySlackUser("alice")
	assert.False(t, ok, "a display name is not a Slack member ID")
	_, ok = a.BySlackUser("")
	assert.False(t, ok)

	bob, ok := a.ByEmail("bob@example.COM")
	require.True(t, ok, "addresses compare without case")
	assert.Equal(t, "bob", bob.Name)
	_, ok = a.ByEmail("mallory@example.com")
	assert.False(t, ok)

	names := func(list []notify.Approver) []string {
		var out []string
		for _, ap := range list {
			out = append(out, ap.Name)
		}
		return out
	}
	assert.Equal(t, []string{"alice", "bob", "carol", "dave"}, names(a.InGroups(nil)), "no groups: everyone")
	assert.Equal(t, []string{"alice", "carol"}, names(a.InGroups([]string{"ops"})), "members, and * for every group")
	assert.Equal(t, []string{"alice", "bob", "carol"}, names(a.InGroups([]string{"ops", "finance"})))
	assert.Equal(t, []string{"carol"}, names(a.InGroups([]string{"legal"})))
}

func TestLoadApproversRefusesBadFiles(t *testing.T) {
	cases := []struct{ name, content, want string }{
		{"unknown key in an entry", "approvers:\n  - {name: a, email: a@example.com, slack: U1}\n", `approvers.yaml:2: unknown key "slack"`},
		{"unknown top-level key", "approver:\n  - {name: a, email: a@example.com}\n", "field approver not found"},
		{"no name", "approvers:\n  - {email: a@example.com}\n", "approvers.yaml:2: approver has no name"},
		{"unreachable", "approvers:\n  - {name: a, groups: [ops]}\n", `approver "a" has neither slack_user nor email`},
		{"display name for a Slack ID", "approvers:\n  - {name: a, slack_user: '@alice'}\n", `slack_user "@alice" is not a Slack member ID`},
		{"bad address", "approvers:\n  - {name: a, email: 'Alice <a@example.com>'}\n", `is not a plain address`},
		{"toolgate's own name", "approvers:\n  - {name: toolgate, email: a@example.com}\n", `approvers.yaml:2: approver "toolgate": the name is toolgate's own`},
		{"a reserved name", "approvers:\n  - {name: timeout, email: a@example.com}\n", `approver "timeout": the name is toolgate's own`},
		{"duplicate name", "approvers:\n  - {name: a, email: a@example.com}\n  - {name: a, email: b@example.com}\n", `approvers.yaml:3: approver "a" is listed twice (first at line 2)`},
		{"duplicate Slack ID", "approvers:\n  - {name: a, slack_user: U1X}\n  - {name: b, slack_user: U1X}\n", `approvers.yaml:3: approver "b": slack_user U1X is also a's`},
		{"duplicate address", "approvers:\n  - {name: a, email: a@example.com}\n  - {name: b, email: A@example.com}\n", `email A@example.com is also a's`},
		{"groups not a list", "approvers:\n  - {name: a, email: a@example.com, groups: ops}\n", "approvers.yaml:2:"},
		{"empty", "", "the file is empty"},
		{"no approvers", "approvers: []\n", "lists no approvers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := notify.LoadApprovers(writeApprovers(t, c.content))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err := notify.LoadApprovers(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "read approvers file")
}
