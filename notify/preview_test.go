package notify_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/notify/notifytest"
	"github.com/toolgate/toolgate/policy"
)

const configDiff = "--- a/config.yaml\n+++ b/config.yaml\n@@ -1 +1 @@\n-port: 80\n+port: 8080\n"

func noticeWithPreview(p policy.Preview) activities.Notice {
	n := notice(activities.NoticeWaiting, 1, "ops")
	n.Call.Tool = "write_file"
	n.Request.Preview = &p
	return n
}

func TestSlackShowsThePreviewAsACodeBlockCutWithALink(t *testing.T) {
	s, fake := slackChannel(t)
	_, err := s.Notify(context.Background(), noticeWithPreview(policy.Preview{Kind: policy.PreviewDiff, Text: configDiff, ComputedBy: policy.ComputedByToolgate}))
	require.NoError(t, err)
	raw := fake.Calls("chat.postMessage")[0].AllText()
	assert.Contains(t, raw, "*What it changes*\n```"+configDiff+"```")
	assert.NotContains(t, raw, "cut short")

	long := strings.Repeat("+line\n", 1000)
	_, err = s.Notify(context.Background(), noticeWithPreview(policy.Preview{Kind: policy.PreviewDiff, Text: long, ComputedBy: policy.ComputedByAgent}))
	require.NoError(t, err)
	raw = fake.Calls("chat.postMessage")[1].AllText()
	assert.Contains(t, raw, "What it changes (computed by the agent)", "an agent's preview is its claim")
	assert.Contains(t, raw, "_cut short_: <https://toolgate.example.com/calls/call-42|the whole preview in the inbox>")
}

func TestEmailShowsThePreview(t *testing.T) {
	srv := notifytest.NewSMTPServer(t, "", "")
	e, _ := emailChannel(t, srv, "", "")
	_, err := e.Notify(context.Background(), noticeWithPreview(policy.Preview{Kind: policy.PreviewCommand, Text: "$ make deploy\nin /ws", ComputedBy: policy.ComputedByToolgate}))
	require.NoError(t, err)
	_, parts, err := srv.Mails()[0].Parts()
	require.NoError(t, err)
	text, html := strings.ReplaceAll(parts["text/plain"], "\r\n", "\n"), strings.ReplaceAll(parts["text/html"], "\r\n", "\n")
	assert.Contains(t, text, "What it runs:\n$ make deploy\nin /ws\n")
	assert.Contains(t, html, ">What it runs</h2>")
	assert.Contains(t, html, "$ make deploy\nin /ws</pre>")
}
