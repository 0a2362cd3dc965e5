package rules

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pemKey = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yQ==\n-----END RSA PRIVATE KEY-----"

func TestBuiltinRedaction(t *testing.T) {
	p := parse(t, "default: ask\n")
	tests := []struct {
		name  string
		in    string
		want  string
		count int
	}{
		// True positives.
		{"aws access key id", "key AKIAIOSFODNN7EXAMPLE in use", "key [REDACTED:aws_access_key_id] in use", 1},
		{"aws session key id", "ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key_id]", 1},
		{"aws secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "aws_secret_access_key = [REDACTED:aws_secret_access_key]\n", 1},
		{"aws secret env", `AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"`, `AWS_SECRET_ACCESS_KEY="[REDACTED:aws_secret_access_key]"`, 1},
		{"github classic", "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok", "token [REDACTED:github_token] ok", 1},
		{"github oauth, server, refresh", "gho_abcdefghijklmnopqrstuvwxyz0123456789 ghs_abcdefghijklmnopqrstuvwxyz0123456789 ghr_abcdefghijklmnopqrstuvwxyz0123456789 ghu_abcdefghijklmnopqrstuvwxyz0123456789",
			"[REDACTED:github_token] [REDACTED:github_token] [REDACTED:github_token] [REDACTED:github_token]", 4},
		{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU", "[REDACTED:github_token]", 1},
		{"gitlab", "glpat-abcdefghij0123456789 done", "[REDACTED:gitlab_token] done", 1},
		{"slack bot", "xoxb-1234567890-0987654321-abcdefghijklmnop", "[REDACTED:slack_token]", 1},
		{"slack user, app, refresh, s", "xoxp-1234567890-ab xoxa-2-abcdefghijkl xoxr-abcdefghijkl xoxs-abcdefghijkl", "[REDACTED:slack_token] [REDACTED:slack_token] [REDACTED:slack_token] [REDACTED:slack_token]", 4},
		{"slack webhook", "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX now", "post to [REDACTED:slack_webhook] now", 1},
		{"pem private key", "before\n" + pemKey + "\nafter", "before\n[REDACTED:private_key]\nafter", 1},
		{"pem cut short", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "[REDACTED:private_key]", 1},
		{"bearer", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "Authorization: Bearer [REDACTED:bearer_token]", 1},
		{"password pair", "password=hunter22 next", "password=[REDACTED:credential] next", 1},
		{"passwd colon", "passwd: s3cr3t!", "passwd: [REDACTED:credential]", 1},
		{"quoted value with spaces", "DB_PASSWORD='correct horse battery'", "DB_PASSWORD='[REDACTED:credential]'", 1},
		{"secret and token in a query", "https://x/cb?secret=abc123&token=zzz&page=2", "https://x/cb?secret=[REDACTED:credential]&token=[REDACTED:credential]&page=2", 2},
		{"embedded json", `{"client_secret": "s3cr3t"}`, `{"client_secret": "[REDACTED:credential]"}`, 1},
		{"token already redacted is counted once", "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "token=[REDACTED:github_token]", 1},
		// False positives.
		{"AKIA alone", "AKIA is a prefix", "AKIA is a prefix", 0},
		{"AKIA too long", "AKIAIOSFODNN7EXAMPLEXX", "AKIAIOSFODNN7EXAMPLEXX", 0},
		{"40 hex without context", "commit 0123456789abcdef0123456789abcdef01234567", "commit 0123456789abcdef0123456789abcdef01234567", 0},
		{"aws secret name alone", "set aws_secret_access_key in your profile", "set aws_secret_access_key in your profile", 0},
		{"ghp prefix", "tokens start with ghp_ or ghp_short", "tokens start with ghp_ or ghp_short", 0},
		{"glpat short", "glpat-short", "glpat-short", 0},
		{"xoxb alone", "xoxb- and xoxo", "xoxb- and xoxo", 0},
		{"slack host alone", "see https://hooks.slack.com/", "see https://hooks.slack.com/", 0},
		{"public key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----", 0},
		{"bearer prose", "the bearer of bad news; Bearer responsibilities", "the bearer of bad news; Bearer responsibilities", 0},
		{"password word", "Forgot your password? Reset the password", "Forgot your password? Reset the password", 0},
		{"password with no value", "password:\nnext line", "password:\nnext line", 0},
		{"code comparing a token", `if token == "" { token := load() }`, `if token == "" { token := load() }`, 0},
		{"passwords plural", "passwords: 3", "passwords: 3", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := json.Marshal(map[string]any{"stdout": tt.in, "exit_code": 0})
			require.NoError(t, err)
			out, n, err := p.TransformOutput(context.Background(), call("shell", `{}`), in)
			require.NoError(t, err)
			assert.Equal(t, tt.count, n)
			require.True(t, json.Valid(out), "output stays valid JSON: %s", out)
			var got map[string]any
			require.NoError(t, json.Unmarshal(out, &got))
			assert.Equal(t, tt.want, got["stdout"])
			assert.Equal(t, float64(0), got["exit_code"])
			if n == 0 {
				assert.Equal(t, string(in), string(out), "unchanged output is returned as is")
			}
		})
	}
}

func TestRedactionKeepsStructure(t *testing.T) {
	p := parse(t, "default: ask\n")
	in := `{"z": 1, "a": ["x", {"password": "hunter2", "password_hint": "pet", "token": 12345, "ok": true, "n": null}],
  "big": 12345678901234567890, "html": "<a&b>", "key": "AKIAIOSFODNN7EXAMPLE"}`
	out, n, err := p.TransformOutput(context.Background(), call("x", `{}`), json.RawMessage(in))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, `{"z":1,"a":["x",{"password":"[REDACTED:credential]","password_hint":"pet","token":"[REDACTED:credential]","ok":true,"n":null}],"big":12345678901234567890,"html":"<a&b>","key":"[REDACTED:aws_access_key_id]"}`, string(out))

	// Whitespace and order survive when nothing is redacted.
	clean := "{\n  \"b\": 1,\n  \"a\": \"fine\"\n}"
	out, n, err = p.TransformOutput(context.Background(), call("x", `{}`), json.RawMessage(clean))
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, clean, string(out))
}

func TestRedactionOfText(t *testing.T) {
	p := parse(t, "default: ask\n")
	out, n, err := p.TransformOutput(context.Background(), call("x", `{}`), json.RawMessage("not json: token=abc123"))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, "not json: token=[REDACTED:credential]", string(out))
}

func TestCustomRedaction(t *testing.T) {
	p := parse(t, `
redact:
  builtin: false
  patterns:
    - name: acme_key
      regex: 'acme_(live|test)_[0-9a-f]{16,}'
    - name: pin
      regex: 'PIN (?P<secret>\d{4})\b'
`)
	in := `["acme_live_0123456789abcdef and acme_test_fedcba9876543210", "PIN 1234 ok", "AKIAIOSFODNN7EXAMPLE", "acme_live_short"]`
	out, n, err := p.TransformOutput(context.Background(), call("x", `{}`), json.RawMessage(in))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, `["[REDACTED:acme_key] and [REDACTED:acme_key]","PIN [REDACTED:pin] ok","AKIAIOSFODNN7EXAMPLE","acme_live_short"]`, string(out),
		"builtin: false turns off the built-in patterns")

	p = parse(t, "redact:\n  disable: [aws_access_key_id, credential]\n")
	out, n, err = p.TransformOutput(context.Background(), call("x", `{}`), json.RawMessage(`{"password":"x","s":"AKIAIOSFODNN7EXAMPLE ghp_abcdefghijklmnopqrstuvwxyz0123456789"}`))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, `{"password":"x","s":"AKIAIOSFODNN7EXAMPLE [REDACTED:github_token]"}`, string(out))
}

func TestRedactionManySecrets(t *testing.T) {
	p := parse(t, "default: ask\n")
	var b strings.Builder
	for range 100 {
		b.WriteString("AKIAIOSFODNN7EXAMPLE ")
	}
	in, _ := json.Marshal(b.String())
	out, n, err := p.TransformOutput(context.Background(), call("x", `{}`), in)
	require.NoError(t, err)
	assert.Equal(t, 100, n)
	assert.True(t, json.Valid(out))
}
