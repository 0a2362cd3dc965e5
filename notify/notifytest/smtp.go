package notifytest

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Mail is one message the SMTP server accepted.
type Mail struct {
	From string
	To   []string
	Data []byte
	// User is who logged in ("" without AUTH).
	User string
}

// Parts decodes a multipart/alternative message into its parts by media
// type (text/plain, text/html), transfer encoding undone, and returns its
// header too.
func (m Mail) Parts() (mail.Header, map[string]string, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		return nil, nil, err
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return msg.Header, nil, err
	}
	if !strings.HasPrefix(mediaType, "multipart/") {
		return msg.Header, nil, errors.New("not a multipart message: " + mediaType)
	}
	parts := map[string]string{}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return msg.Header, parts, err
		}
		body, err := io.ReadAll(p) // NextPart undoes quoted-printable
		if err != nil {
			return msg.Header, parts, err
		}
		mt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		parts[mt] = string(body)
	}
	return msg.Header, parts, nil
}

// SMTPServer is an SMTP server in the test process that keeps every
// message it accepts.
type SMTPServer struct {
	// Addr is host:port to send to (SMTP_ADDR).
	Addr string

	username, password string
	srv                *smtp.Server
	mu                 sync.Mutex
	mails              []Mail
	rejectRcpt         map[string]bool
}

// NewSMTPServer starts a server on 127.0.0.1; with a username, it offers
// AUTH PLAIN (over plain text, as to localhost) and refuses mail without
// it. It stops with the test.
func NewSMTPServer(t testing.TB, username, password string) *SMTPServer {
	s := &SMTPServer{username: username, password: password, rejectRcpt: map[string]bool{}}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{s: s}, nil }))
	s.srv.Domain = "localhost"
	s.srv.AllowInsecureAuth = true
	s.srv.ReadTimeout, s.srv.WriteTimeout = 10*time.Second, 10*time.Second
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// RejectRecipient makes the server refuse addr with 550.
func (s *SMTPServer) RejectRecipient(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectRcpt[strings.ToLower(addr)] = true
}

// Mails returns the messages accepted so far.
func (s *SMTPServer) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.mails...)
}

// MailsTo returns the messages accepted for addr.
func (s *SMTPServer) MailsTo(addr string) []Mail {
	var out []Mail
	for _, m := range s.Mails() {
		for _, to := range m.To {
			if strings.EqualFold(to, addr) {
				out = append(out, m)
			}
		}
	}
	return out
}

// WaitMailsTo waits until at least n messages for addr arrived.
func (s *SMTPServer) WaitMailsTo(t testing.TB, addr string, n int, timeout time.Duration) []Mail {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := s.MailsTo(addr); len(m) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("SMTP server: want %d messages to %s within %s, got %d", n, addr, timeout, len(s.MailsTo(addr)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type smtpSession struct {
	s    *SMTPServer
	user string
	cur  Mail
}

var _ smtp.AuthSession = (*smtpSession)(nil)

func (ss *smtpSession) AuthMechanisms() []string {
	if ss.s.username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *smtpSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != ss.s.username || password != ss.s.password {
			return smtp.ErrAuthFailed
		}
		ss.user = username
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.username != "" && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	ss.cur = Mail{From: from, User: ss.user}
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.s.mu.Lock()
	reject := ss.s.rejectRcpt[strings.ToLower(to)]
	ss.s.mu.Unlock()
	if reject {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	}
	ss.cur.To = append(ss.cur.To, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.cur.Data = b
	ss.s.mu.Lock()
	ss.s.mails = append(ss.s.mails, ss.cur)
	ss.s.mu.Unlock()
	return nil
}

func (ss *smtpSession) Reset()        { ss.cur = Mail{User: ss.user} }
func (ss *smtpSession) Logout() error { return nil }
