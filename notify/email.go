package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"net/url"
	"strings"
	"text/template"
	"time"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/visible"
)

// EmailOptions configure the email channel.
type EmailOptions struct {
	// Addr is the SMTP server, host:port. Required.
	Addr string
	// Username and Password log in with AUTH PLAIN when Username is set;
	// net/smtp sends them only over TLS or to localhost.
	Username, Password string
	// From is the sender. Required.
	From *mail.Address
	// PublicURL is the base of the decision links. Required.
	PublicURL string
	// Approvers are the recipients: those of the notice's groups who have
	// an email address. Required.
	Approvers *Approvers
	// Links signs the decision links. Required.
	Links *LinkSigner
	// Logger; nil means no logs.
	Logger *zap.Logger
	// Now is the clock for link expiry without a deadline; nil is time.Now.
	Now func() time.Time
}

// Email mails each notice to the approvers of its groups: one message per
// recipient, as text and HTML, with one signed link per decision. The
// links open a confirmation page; only its form (a POST) decides, so a
// mail scanner that follows links decides nothing.
//
// Delivery is at least once: when a send fails part-way, the activity's
// retry sends the notice to every recipient again. Each message's
// Message-ID is derived from the call, the notice and the recipient, so
// mail programs can spot the duplicate.
type Email struct {
	opts EmailOptions
}

var _ activities.Channel = (*Email)(nil)

// NewEmail returns the email channel.
func NewEmail(opts EmailOptions) *Email {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Email{opts: opts}
}

// Name returns ChannelEmail.
func (e *Email) Name() string { return ChannelEmail }

// RefEmailRecipients is the receipt ref listing the addresses mailed,
// comma-separated.
const RefEmailRecipients = "recipients"

// smtpTimeout bounds one SMTP session when the context has no deadline.
const smtpTimeout = time.Minute

// Notify mails the notice to every approver of its groups who has an
// address.
func (e *Email) Notify(ctx context.Context, n activities.Notice) (activities.Receipt, error) {
	var to []Approver
	for _, ap := range e.opts.Approvers.InGroups(n.Groups) {
		if ap.Email != "" {
			to = append(to, ap)
		}
	}
	receipt := activities.Receipt{Channel: ChannelEmail, Ref: map[string]string{}}
	if len(to) == 0 {
		e.opts.Logger.Warn("No approver with an email address for this call", zap.String("callID", n.Call.ID), zap.Strings("groups", n.Groups))
		return receipt, nil
	}
	msgs := make([]outgoing, 0, len(to))
	for _, ap := range to {
		msg, err := e.Message(n, ap)
		if err != nil {
			return receipt, err
		}
		msgs = append(msgs, outgoing{to: ap.Email, data: msg})
	}
	sent, err := e.send(ctx, msgs)
	if err != nil {
		return receipt, err
	}
	receipt.Ref[RefEmailRecipients] = strings.Join(sent, ",")
	e.opts.Logger.Info("Mailed approvers", zap.String("callID", n.Call.ID), zap.String("kind", string(n.Kind)), zap.Strings("recipients", sent))
	return receipt, nil
}

// Resolve does nothing: the links of a decided call show who decided it.
func (e *Email) Resolve(context.Context, activities.Outcome, []activities.Receipt) error { return nil }

type outgoing struct {
	to   string
	data []byte
}

// send delivers msgs over one SMTP session. A recipient the server refuses
// for good (5xx) is logged and skipped, since a retry would only mail the
// others again; anything else fails the send so the activity retries.
func (e *Email) send(ctx context.Context, msgs []outgoing) ([]string, error) {
	host, _, err := net.SplitHostPort(e.opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("smtp: address %q: %w", e.opts.Addr, err)
	}
	conn, err := (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, "tcp", e.opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("smtp: connect to %s: %w", e.opts.Addr, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(smtpTimeout)
	}
	_ = conn.SetDeadline(deadline)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("smtp: greeting from %s: %w", e.opts.Addr, err)
	}
	defer c.Close()
	if err := c.Hello(e.helloName()); err != nil {
		return nil, fmt.Errorf("smtp: EHLO: %w", err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}); err != nil {
			return nil, fmt.Errorf("smtp: STARTTLS with %s: %w", e.opts.Addr, err)
		}
	}
	if e.opts.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return nil, fmt.Errorf("smtp: %s does not offer AUTH, but SMTP_USERNAME is set", e.opts.Addr)
		}
		if err := c.Auth(smtp.PlainAuth("", e.opts.Username, e.opts.Password, host)); err != nil {
			return nil, fmt.Errorf("smtp: log in as %s: %w", e.opts.Username, err)
		}
	}
	var sent []string
	for _, m := range msgs {
		err := deliver(c, e.opts.From.Address, m)
		var te *textproto.Error
		switch {
		case err == nil:
			sent = append(sent, m.to)
		case errors.As(err, &te) && te.Code >= 500:
			e.opts.Logger.Error("Mail server refused a recipient", zap.String("to", m.to), zap.Error(err))
			if rerr := c.Reset(); rerr != nil {
				return sent, fmt.Errorf("smtp: RSET: %w", rerr)
			}
		default:
			return sent, fmt.Errorf("smtp: send to %s: %w", m.to, err)
		}
	}
	if err := c.Quit(); err != nil {
		e.opts.Logger.Debug("SMTP QUIT failed after the messages were accepted", zap.Error(err))
	}
	return sent, nil
}

func deliver(c *smtp.Client, from string, m outgoing) error {
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(m.to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(m.data); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// helloName is the name toolgate gives in EHLO: the public URL's host,
// an address as an address literal.
func (e *Email) helloName() string {
	u, err := url.Parse(e.opts.PublicURL)
	if err != nil || u.Hostname() == "" {
		return "localhost"
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil {
		if ip.To4() != nil {
			return "[" + h + "]"
		}
		return "[IPv6:" + h + "]"
	}
	return h
}

// DecisionURL is the link of one decision: PublicURL/email/decide?t=TOKEN.
func DecisionURL(publicURL, token string) string {
	return strings.TrimRight(publicURL, "/") + "/email/decide?t=" + url.QueryEscape(token)
}

// emailLink is one decision link in a message.
type emailLink struct {
	Decision, Label, URL string
	Danger               bool
}

var linkLabels = map[string]string{
	"approve":             "Approve",
	"approve_for_session": "Approve for session",
	"deny":                "Deny",
	"deny_always":         "Deny always",
}

// emailView is what the message templates render.
type emailView struct {
	Headline, Note, Message          string
	Tool, CallID, Session, Requester string
	Rule, AskedOf, Deadline, Args    string
	// PreviewTitle and Preview show what the call will change.
	PreviewTitle, Preview            string
	Links                            []emailLink
	Name, Address, Expires, InboxURL string
}

// Message builds the MIME message (multipart/alternative: text, HTML) of a
// notice for one approver, with links signed for their address.
func (e *Email) Message(n activities.Notice, to Approver) ([]byte, error) {
	expiry := n.Deadline
	if expiry.IsZero() {
		expiry = e.opts.Now().Add(DefaultLinkTTL)
	}
	v := emailView{
		Headline: headline(n), Note: kindNote(n), Message: visible.Text(n.Request.Message),
		Tool: n.Call.Tool, CallID: n.Call.ID, Session: n.Call.Session, Requester: n.Call.Requester,
		Rule: n.Request.Rule, AskedOf: "any approver", Deadline: utc(n.Deadline), Args: argsText(n.Call.Args),
		Name: to.Name, Address: to.Email, Expires: utc(expiry), InboxURL: callPageURL(e.opts.PublicURL, n.Call.ID),
		Preview: previewText(n.Request.Preview),
	}
	if p := n.Request.Preview; p != nil {
		v.PreviewTitle = p.Heading()
	}
	if len(n.Groups) > 0 {
		v.AskedOf = strings.Join(n.Groups, ", ")
	}
	for _, d := range LinkDecisions {
		token, err := e.opts.Links.Sign(n.Call.ID, to.Email, d, expiry)
		if err != nil {
			return nil, err
		}
		v.Links = append(v.Links, emailLink{Decision: d, Label: linkLabels[d], URL: DecisionURL(e.opts.PublicURL, token), Danger: strings.HasPrefix(d, "deny")})
	}
	var text, html bytes.Buffer
	if err := textMail.Execute(&text, v); err != nil {
		return nil, fmt.Errorf("render email text: %w", err)
	}
	if err := htmlMail.Execute(&html, v); err != nil {
		return nil, fmt.Errorf("render email HTML: %w", err)
	}

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, part := range []struct {
		ctype string
		data  []byte
	}{{"text/plain; charset=utf-8", text.Bytes()}, {"text/html; charset=utf-8", html.Bytes()}} {
		pw, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.ctype},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(pw)
		if _, err := qp.Write(part.data); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}

	var msg bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&msg, "%s: %s\r\n", k, v) }
	recipient := mail.Address{Name: to.Name, Address: to.Email}
	header("From", e.opts.From.String())
	header("To", recipient.String())
	header("Subject", mime.QEncoding.Encode("utf-8", oneLine("[toolgate] "+v.Headline+" (call "+n.Call.ID+")")))
	header("Date", e.opts.Now().UTC().Format(time.RFC1123Z))
	header("Message-ID", messageID(n, to.Email, e.opts.From.Address))
	header("MIME-Version", "1.0")
	header("Auto-Submitted", "auto-generated")
	header("X-Toolgate-Call", oneLine(n.Call.ID))
	header("Content-Type", `multipart/alternative; boundary="`+mw.Boundary()+`"`)
	msg.WriteString("\r\n")
	msg.Write(body.Bytes())
	return msg.Bytes(), nil
}

// messageID is the same for every send of one notice to one recipient.
func messageID(n activities.Notice, to, from string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s\x00%s", n.Call.ID, n.Seq, n.Kind, strings.ToLower(to))))
	domain := "toolgate.invalid"
	if _, d, ok := strings.Cut(from, "@"); ok && d != "" {
		domain = d
	}
	return "<toolgate." + hex.EncodeToString(sum[:12]) + "@" + domain + ">"
}

// oneLine keeps header values on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// parseFrom reads SMTP_FROM: an address, with or without a name.
func parseFrom(s string) (*mail.Address, error) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not an address like toolgate <toolgate@example.com>", s)
	}
	return a, nil
}

var textMail = template.Must(template.New("text").Parse(`{{.Headline}}
{{with .Note}}
{{.}}
{{end}}{{with .Message}}
{{.}}
{{end}}
Tool:         {{.Tool}}
Call:         {{.CallID}}
Session:      {{.Session}}
{{with .Requester}}Requested by: {{.}}
{{end}}{{with .Rule}}Rule:         {{.}}
{{end}}Asked of:     {{.AskedOf}}
Deadline:     {{.Deadline}}
{{with .Preview}}
{{$.PreviewTitle}}:
{{.}}
{{end}}
Arguments:
{{.Args}}

Decide (each link opens a page that asks you to confirm; nothing is
decided until you do):
{{range .Links}}
{{.Label}}:
{{.URL}}
{{end}}
These links are for {{.Name}} <{{.Address}}> only: whoever holds them
decides as you. They work once and expire at {{.Expires}}.
{{with .InboxURL}}
Open the call in the inbox: {{.}}
{{end}}`))

var htmlMail = htmltemplate.Must(htmltemplate.New("html").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Headline}}</title></head>
<body style="font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2330;line-height:1.45">
<h1 style="font-size:20px">{{.Headline}}</h1>
{{with .Note}}<p style="background:#fff8e1;border:1px solid #f0d98a;border-radius:6px;padding:8px 12px"><strong>{{.}}</strong></p>{{end}}
{{with .Message}}<p>{{.}}</p>{{end}}
<table style="border-collapse:collapse" cellpadding="4">
<tr><td style="color:#5d6677">Tool</td><td><code>{{.Tool}}</code></td></tr>
<tr><td style="color:#5d6677">Call</td><td><code>{{.CallID}}</code></td></tr>
<tr><td style="color:#5d6677">Session</td><td><code>{{.Session}}</code></td></tr>
{{with .Requester}}<tr><td style="color:#5d6677">Requested by</td><td>{{.}}</td></tr>{{end}}
{{with .Rule}}<tr><td style="color:#5d6677">Rule</td><td>{{.}}</td></tr>{{end}}
<tr><td style="color:#5d6677">Asked of</td><td>{{.AskedOf}}</td></tr>
<tr><td style="color:#5d6677">Deadline</td><td>{{.Deadline}}</td></tr>
</table>
{{with .Preview}}<h2 style="font-size:16px">{{$.PreviewTitle}}</h2>
<pre style="background:#f5f6f8;border:1px solid #dde1e7;border-radius:6px;padding:8px;white-space:pre-wrap;word-break:break-all">{{.}}</pre>{{end}}
<h2 style="font-size:16px">Arguments</h2>
<pre style="background:#f5f6f8;border:1px solid #dde1e7;border-radius:6px;padding:8px;white-space:pre-wrap;word-break:break-all">{{.Args}}</pre>
<p>Each button opens a page that asks you to confirm; nothing is decided until you do.</p>
<p>{{range .Links}}<a href="{{.URL}}" style="display:inline-block;margin:0 8px 8px 0;padding:8px 14px;border-radius:6px;text-decoration:none;color:#fff;background:{{if .Danger}}#c62828{{else}}#1f6feb{{end}}">{{.Label}}</a>{{end}}</p>
<p style="color:#5d6677;font-size:13px">These links are for {{.Name}} &lt;{{.Address}}&gt; only: whoever holds them decides as you. They work once and expire at {{.Expires}}.{{with .InboxURL}} <a href="{{.}}">Open the call in the inbox</a>.{{end}}</p>
</body></html>
`))
