package notify_test

import (
	"context"
	"mime"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/notify/notifytest"
)

const publicURL = "http://toolgate.test:7700"

func emailChannel(t *testing.T, srv *notifytest.SMTPServer, user, pass string) (*notify.Email, *notify.LinkSigner) {
	approvers, err := notify.ParseApprovers("approvers.yaml", []byte(approversYAML))
	require.NoError(t, err)
	links := signer(t, "email-test-secret-0123456789")
	return notify.NewEmail(notify.EmailOptions{
		Addr: srv.Addr, Username: user, Password: pass, From: &mail.Address{Name: "toolgate", Address: "toolgate@example.com"},
		PublicURL: publicURL, Approvers: approvers, Links: links, Logger: zap.NewNop(),
		Now: func() time.Time { return deadline.Add(-time.Hour) },
	}), links
}

var linkRE = regexp.MustCompile(`http://toolgate\.test:7700/email/decide\?t=[A-Za-z0-9_.%-]+`)

func TestEmailNotifySendsTextAndHTMLWithOneLinkPerDecision(t *testing.T) {
	srv := notifytest.NewSMTPServer(t, "", "")
	e, links := emailChannel(t, srv, "", "")
	r, err := e.Notify(context.Background(), notice(activities.NoticeWaiting, 1, "ops"))
	require.NoError(t, err)
	assert.Equal(t, "alice@example.com", r.Ref["recipients"], "ops: alice; carol is in every group but has no address")

	mails := srv.Mails()
	require.Len(t, mails, 1)
	m := mails[0]
	assert.Equal(t, "toolgate@example.com", m.From)
	assert.Equal(t, []string{"alice@example.com"}, m.To)
	h, parts, err := m.Parts()
	require.NoError(t, err)
	subject, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject"))
	require.NoError(t, err)
	assert.Contains(t, subject, "Approval needed: shell")
	assert.Contains(t, subject, "call-42")
	to, err := mail.ParseAddress(h.Get("To"))
	require.NoError(t, err)
	assert.Equal(t, mail.Address{Name: "alice", Address: "alice@example.com"}, *to)
	assert.Contains(t, h.Get("Message-ID"), "@example.com>")
	require.Contains(t, parts, "text/plain")
	require.Contains(t, parts, "text/html")

	for _, part := range []string{"text/plain", "text/html"} {
		body := parts[part]
		for _, want := range []string{"call-42", "sess-1", "shell", "agent-1", "Run shell command", "rm notes.txt", "ops", "2026-05-01 13:00:00 UTC",
			"http://toolgate.test:7700/calls/call-42"} {
			assert.Contains(t, body, want, part)
		}
		found := linkRE.FindAllString(body, -1)
		require.Len(t, found, 4, "%s: one link per decision\n%s", part, body)
		var decisions []string
		for _, l := range found {
			u, err := url.Parse(strings.ReplaceAll(l, "&amp;", "&"))
			require.NoError(t, err)
			c, err := links.Verify(u.Query().Get("t"), deadline.Add(-time.Minute))
			require.NoError(t, err, part)
			assert.Equal(t, "call-42", c.CallID)
			assert.Equal(t, "alice@example.com", c.Recipient)
			assert.Equal(t, deadline.Unix(), c.Expires.Unix(), "links expire with the call")
			decisions = append(decisions, c.Decision)
		}
		assert.Equal(t, []string{"approve", "approve_for_session", "deny", "deny_always"}, decisions, part)
	}
	assert.NotContains(t, parts["text/html"], "<@U_EVERYONE>", "arguments are escaped in HTML")
	assert.Contains(t, parts["text/html"], "&lt;@U_EVERYONE&gt;")
}

func TestEmailRecipientsFollowTheGroups(t *testing.T) {
	srv := notifytest.NewSMTPServer(t, "", "")
	e, _ := emailChannel(t, srv, "", "")
	ctx := context.Background()

	r, err := e.Notify(ctx, notice(activities.NoticeWaiting, 1))
	require.NoError(t, err)
	assert.Equal(t, "alice@example.com,bob@example.com,dave@example.com", strings.ToLower(r.Ref["recipients"]), "no groups: every approver with an address")

	r, err = e.Notify(ctx, notice(activities.NoticeEscalation, 2, "finance"))
	require.NoError(t, err)
	assert.Equal(t, "bob@example.com", strings.ToLower(r.Ref["recipients"]))
	escalation := srv.MailsTo("Bob@Example.com")
	require.Len(t, escalation, 2)
	_, parts, err := escalation[1].Parts()
	require.NoError(t, err)
	assert.Contains(t, parts["text/plain"], "Escalation: nobody decided in time, so finance may now decide this call too.")

	r, err = e.Notify(ctx, notice(activities.NoticeWaiting, 3, "legal"))
	require.NoError(t, err, "nobody to mail is not worth a retry")
	assert.Empty(t, r.Ref["recipients"])
}

func TestEmailLogsInAndSkipsRefusedRecipients(t *testing.T) {
	srv := notifytest.NewSMTPServer(t, "mailer", "s3cret")
	e, _ := emailChannel(t, srv, "mailer", "s3cret")
	srv.RejectRecipient("bob@example.com")
	r, err := e.Notify(context.Background(), notice(activities.NoticeWaiting, 1))
	require.NoError(t, err)
	assert.Equal(t, "alice@example.com,dave@example.com", r.Ref["recipients"], "a refused mailbox is skipped, the others get theirs")
	for _, m := range srv.Mails() {
		assert.Equal(t, "mailer", m.User)
	}

	bad, _ := emailChannel(t, srv, "mailer", "wrong")
	_, err = bad.Notify(context.Background(), notice(activities.NoticeWaiting, 1))
	assert.ErrorContains(t, err, "log in as mailer")

	noAuth, _ := emailChannel(t, notifytest.NewSMTPServer(t, "", ""), "mailer", "s3cret")
	_, err = noAuth.Notify(context.Background(), notice(activities.NoticeWaiting, 1))
	assert.ErrorContains(t, err, "does not offer AUTH")
}

func TestEmailFailsWhenTheServerIsDown(t *testing.T) {
	srv := notifytest.NewSMTPServer(t, "", "")
	e, _ := emailChannel(t, srv, "", "")
	down := notify.NewEmail(notify.EmailOptions{Addr: "127.0.0.1:1", From: &mail.Address{Address: "t@example.com"}, PublicURL: publicURL,
		Approvers: mustApprovers(t), Links: signer(t, "email-test-secret-0123456789")})
	_, err := down.Notify(context.Background(), notice(activities.NoticeWaiting, 1))
	assert.ErrorContains(t, err, "smtp: connect to 127.0.0.1:1")
	assert.NoError(t, e.Resolve(context.Background(), activities.Outcome{Event: activities.EventDecided}, nil))
}

func mustApprovers(t *testing.T) *notify.Approvers {
	a, err := notify.ParseApprovers("approvers.yaml", []byte(approversYAML))
	require.NoError(t, err)
	return a
}
