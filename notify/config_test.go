package notify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/notify"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func fullEnv(t *testing.T) map[string]string {
	return map[string]string{
		"SLACK_BOT_TOKEN":         "xoxb-test",
		"SLACK_SIGNING_SECRET":    "signing-secret",
		"SLACK_CHANNEL":           "#approvals",
		"SLACK_API_URL":           "http://127.0.0.1:9/api",
		"SMTP_ADDR":               "127.0.0.1:2525",
		"SMTP_USERNAME":           "toolgate",
		"SMTP_PASSWORD":           "secret ",
		"SMTP_FROM":               "toolgate <toolgate@example.com>",
		"TOOLGATE_PUBLIC_URL":     "https://toolgate.example.com",
		"TOOLGATE_APPROVERS_FILE": writeApprovers(t, approversYAML),
		"TOOLGATE_WEBHOOK_URLS":   "https://hooks.example.com/a, https://hooks.example.com/b",
		"TOOLGATE_WEBHOOK_SECRET": "webhook-secret",
		"TOOLGATE_LINK_SECRET":    "link-secret-0123456789",
	}
}

func TestFromEnv(t *testing.T) {
	c, err := notify.FromEnv(env(fullEnv(t)), "")
	require.NoError(t, err)
	assert.Equal(t, "xoxb-test", c.SlackBotToken)
	assert.Equal(t, "#approvals", c.SlackChannel)
	assert.Equal(t, "http://127.0.0.1:9/api", c.SlackAPIURL)
	assert.Equal(t, "secret ", c.SMTPPassword, "passwords are taken as they are")
	assert.Equal(t, []string{"https://hooks.example.com/a", "https://hooks.example.com/b"}, c.WebhookURLs)
	assert.Equal(t, []byte("link-secret-0123456789"), c.LinkSecret)
	require.NotNil(t, c.Approvers)
	assert.Len(t, c.Approvers.All(), 4)
	require.NotNil(t, c.LinkSigner())

	chans, err := c.Channels(nil)
	require.NoError(t, err)
	var names []string
	for _, ch := range chans {
		names = append(names, ch.Name())
	}
	assert.Equal(t, []string{"slack", "email", "webhook"}, names)
}

func TestFromEnvNothingConfigured(t *testing.T) {
	c, err := notify.FromEnv(env(nil), t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, notify.DefaultSlackAPIURL, c.SlackAPIURL)
	assert.False(t, c.SlackEnabled())
	assert.False(t, c.EmailEnabled())
	chans, err := c.Channels(nil)
	require.NoError(t, err)
	assert.Empty(t, chans)
}

func TestFromEnvGeneratesTheLinkSecretForDev(t *testing.T) {
	e := fullEnv(t)
	delete(e, "TOOLGATE_LINK_SECRET")
	_, err := notify.FromEnv(env(e), "")
	assert.ErrorContains(t, err, "email needs TOOLGATE_LINK_SECRET", "without a data dir the secret must be given")

	dir := t.TempDir()
	c, err := notify.FromEnv(env(e), dir)
	require.NoError(t, err)
	kept, err := os.ReadFile(filepath.Join(dir, "link-secret"))
	require.NoError(t, err)
	assert.Equal(t, string(c.LinkSecret)+"\n", string(kept))
	again, err := notify.FromEnv(env(e), dir)
	require.NoError(t, err)
	assert.Equal(t, c.LinkSecret, again.LinkSecret)
}

func TestFromEnvRefusesHalfSettings(t *testing.T) {
	approvers := writeApprovers(t, approversYAML)
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bot token without channel", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TOOLGATE_APPROVERS_FILE": approvers},
			"Slack needs SLACK_BOT_TOKEN, SLACK_CHANNEL and SLACK_SIGNING_SECRET together; SLACK_CHANNEL not set"},
		{"channel alone", map[string]string{"SLACK_CHANNEL": "#a", "TOOLGATE_APPROVERS_FILE": approvers},
			"SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET not set"},
		{"not a bot token", map[string]string{"SLACK_BOT_TOKEN": "hunter2", "SLACK_CHANNEL": "#a", "SLACK_SIGNING_SECRET": "s", "TOOLGATE_APPROVERS_FILE": approvers},
			"SLACK_BOT_TOKEN does not look like a Slack token"},
		{"Slack without approvers", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_CHANNEL": "#a", "SLACK_SIGNING_SECRET": "s"},
			"need TOOLGATE_APPROVERS_FILE"},
		{"bad API URL", map[string]string{"SLACK_API_URL": "ftp://x"}, `SLACK_API_URL: "ftp://x" is not an http(s) URL`},
		{"SMTP without sender", map[string]string{"SMTP_ADDR": "mail:25", "TOOLGATE_PUBLIC_URL": "https://t.example.com", "TOOLGATE_LINK_SECRET": "0123456789abcdef", "TOOLGATE_APPROVERS_FILE": approvers},
			"email needs SMTP_FROM"},
		{"SMTP without public URL", map[string]string{"SMTP_ADDR": "mail:25", "SMTP_FROM": "t@example.com", "TOOLGATE_LINK_SECRET": "0123456789abcdef", "TOOLGATE_APPROVERS_FILE": approvers},
			"email needs TOOLGATE_PUBLIC_URL"},
		{"SMTP address without port", map[string]string{"SMTP_ADDR": "mail", "SMTP_FROM": "t@example.com", "TOOLGATE_PUBLIC_URL": "https://t.example.com", "TOOLGATE_LINK_SECRET": "0123456789abcdef", "TOOLGATE_APPROVERS_FILE": approvers},
			`SMTP_ADDR "mail" must be host:port`},
		{"username without password", map[string]string{"SMTP_ADDR": "mail:25", "SMTP_USERNAME": "u", "SMTP_FROM": "t@example.com", "TOOLGATE_PUBLIC_URL": "https://t.example.com", "TOOLGATE_LINK_SECRET": "0123456789abcdef", "TOOLGATE_APPROVERS_FILE": approvers},
			"SMTP_USERNAME and SMTP_PASSWORD go together"},
		{"sender without server", map[string]string{"SMTP_FROM": "t@example.com"}, "SMTP_FROM is set but SMTP_ADDR is not"},
		{"short link secret", map[string]string{"TOOLGATE_LINK_SECRET": "short"}, "TOOLGATE_LINK_SECRET must be at least 16 characters"},
		{"webhooks without secret", map[string]string{"TOOLGATE_WEBHOOK_URLS": "https://h.example.com"}, "webhooks need TOOLGATE_WEBHOOK_SECRET"},
		{"webhook secret alone", map[string]string{"TOOLGATE_WEBHOOK_SECRET": "s"}, "TOOLGATE_WEBHOOK_SECRET is set but TOOLGATE_WEBHOOK_URLS is not"},
		{"bad webhook URL", map[string]string{"TOOLGATE_WEBHOOK_URLS": "https://ok.example.com,hooks.example.com", "TOOLGATE_WEBHOOK_SECRET": "s"}, `"hooks.example.com" is not an http(s) URL`},
		{"bad approvers file", map[string]string{"TOOLGATE_APPROVERS_FILE": writeApprovers(t, "approvers:\n  - {name: x}\n")}, "TOOLGATE_APPROVERS_FILE:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := notify.FromEnv(env(c.env), "")
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// Channels refuses a hand-built config as FromEnv would.
	_, err := notify.Config{SlackBotToken: "xoxb-1"}.Channels(nil)
	assert.ErrorContains(t, err, "SLACK_CHANNEL")
}

func TestUnknownSettings(t *testing.T) {
	got := notify.UnknownSettings([]string{"SLACK_CHANEL=#a", "SLACK_BOT_TOKEN=x", "SMTP_HOST=mail", "TOOLGATE_WEBHOOK_URL=x", "TOOLGATE_POLICY=p.yaml", "HOME=/root"})
	require.Len(t, got, 3)
	assert.Contains(t, got[0], "SLACK_CHANEL is not a toolgate setting")
	assert.Contains(t, got[1], "SMTP_HOST")
	assert.Contains(t, got[2], "TOOLGATE_WEBHOOK_URL ")
}

func TestConfigStringRedactsSecrets(t *testing.T) {
	c, err := notify.FromEnv(env(fullEnv(t)), "")
	require.NoError(t, err)
	for _, s := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c)} {
		for _, secret := range []string{"xoxb-test", "signing-secret", "secret ", "webhook-secret", "link-secret-0123456789"} {
			assert.NotContains(t, s, secret)
		}
		assert.Contains(t, s, "#approvals")
	}
}
