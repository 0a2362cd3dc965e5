package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// runCLI runs the program with args and no Temporal behind it: the
// cases here are refused before anything is dialled.
func runCLI(args ...string) (code int, stderr string) {
	var out, errs bytes.Buffer
	code = run(context.Background(), append(args, "--temporal-address", "127.0.0.1:1"), &out, &errs)
	return code, errs.String()
}

func TestAVerbGivenTheWrongArgumentsSaysWhatItTakesAndWhatItGot(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pending", "extra"}, `pending takes no arguments (got 1: "extra"); see 'toolgate pending --help'`},
		{[]string{"status"}, `status takes CALL_ID (got none)`},
		{[]string{"status", "a", "b c"}, `status takes CALL_ID (got 2: "a" "b c")`},
		{[]string{"call"}, `call takes TOOL [ARGS_JSON] (got none)`},
		{[]string{"session", "revoke", "s", "t", "u", "v", "w"}, `revoke takes SESSION TOOL (got 5: "s" "t" "u" …)`},
	} {
		code, stderr := runCLI(c.args...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
}

func TestSessionEndAndRevokeNeedByAsApproveAndDenyDo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"session", "end", "s1"}, "--by must name who ends the session (with --api the token names you)"},
		{[]string{"session", "revoke", "s1", "shell"}, "--by must name who revokes (with --api the token names you)"},
		{[]string{"cancel", "c1"}, "--by must name who cancels (with --api the token names you)"},
		{[]string{"approve", "c1"}, "--by must name who decides (with --api the token names you)"},
		{[]string{"deny", "c1"}, "--by must name who decides (with --api the token names you)"},
	} {
		code, stderr := runCLI(c.args...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%v: nothing is recorded under a name nobody gave", c.args)
		assert.NotContains(t, stderr, "127.0.0.1:1", "%v: refused before Temporal is dialled", c.args)
	}
}
