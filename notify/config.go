// Package notify reaches approvers where they are: a Slack message with
// buttons, an email with one signed link per decision, and signed webhook
// events for anything else. Each is an activities.Channel; the call
// workflow sends every notice through every configured channel, one
// retried activity per channel, and tells each channel how the call ended.
//
// Settings come from the environment (FromEnv); who may decide through
// Slack or a link comes from the approvers file (LoadApprovers). The HTTP
// endpoints that take the decisions live in package server.
package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
)

// Channel names, as receipts, logs and decisions record them.
const (
	ChannelSlack   = "slack"
	ChannelEmail   = "email"
	ChannelWebhook = "webhook"
)

// DefaultSlackAPIURL is Slack's Web API.
const DefaultSlackAPIURL = "https://slack.com/api/"

// Environment variables FromEnv reads.
const (
	EnvSlackBotToken      = "SLACK_BOT_TOKEN"
	EnvSlackSigningSecret = "SLACK_SIGNING_SECRET"
	EnvSlackChannel       = "SLACK_CHANNEL"
	EnvSlackAPIURL        = "SLACK_API_URL"
	EnvSMTPAddr           = "SMTP_ADDR"
	EnvSMTPUsername       = "SMTP_USERNAME"
	EnvSMTPPassword       = "SMTP_PASSWORD"
	EnvSMTPFrom           = "SMTP_FROM"
	EnvPublicURL          = "TOOLGATE_PUBLIC_URL"
	EnvApproversFile      = "TOOLGATE_APPROVERS_FILE"
	EnvWebhookURLs        = "TOOLGATE_WEBHOOK_URLS"
	EnvWebhookSecret      = "TOOLGATE_WEBHOOK_SECRET"
	EnvLinkSecret         = "TOOLGATE_LINK_SECRET"
)

// Config is toolgate's notification settings, one field per environment
// variable. Every field is optional; a channel is on when its settings
// are, and half a channel's settings is an error (Validate).
type Config struct {
	// SlackBotToken (SLACK_BOT_TOKEN) is the Slack app's bot token
	// (xoxb-…). With SlackChannel it turns Slack on: every call that asks a
	// person is posted there with buttons.
	SlackBotToken string
	// SlackSigningSecret (SLACK_SIGNING_SECRET) is the Slack app's signing
	// secret; the HTTP listener checks every request to
	// /slack/interactions with it. Required with Slack.
	SlackSigningSecret string
	// SlackChannel (SLACK_CHANNEL) is the channel approval messages go to:
	// an ID (C0123ABCD) or a name (#approvals). Required with Slack.
	SlackChannel string
	// SlackAPIURL (SLACK_API_URL) is the base URL of the Slack Web API;
	// default DefaultSlackAPIURL. Set for a proxy, or a fake in tests.
	SlackAPIURL string

	// SMTPAddr (SMTP_ADDR) is the mail server, host:port. It turns email
	// on: every call that asks a person is mailed to the approvers of its
	// groups (everyone in the approvers file when it names none), with one
	// signed link per decision. STARTTLS is used when the server offers it.
	SMTPAddr string
	// SMTPUsername and SMTPPassword (SMTP_USERNAME, SMTP_PASSWORD) log in
	// with AUTH PLAIN; both or neither. Credentials are only sent over TLS
	// or to a server on localhost.
	SMTPUsername string
	SMTPPassword string
	// SMTPFrom (SMTP_FROM) is the sender, e.g. "toolgate
	// <toolgate@example.com>". Required with email.
	SMTPFrom string

	// PublicURL (TOOLGATE_PUBLIC_URL) is the base of links in messages: the
	// address approvers reach the HTTP listener at, e.g.
	// https://toolgate.example.com. Required with email; with Slack it adds
	// a link to the call's inbox page.
	PublicURL string
	// ApproversFile (TOOLGATE_APPROVERS_FILE) lists who may decide through
	// Slack and email links, and where to reach them. Required with Slack
	// or email.
	ApproversFile string
	// Approvers is ApproversFile, loaded by FromEnv.
	Approvers *Approvers

	// WebhookURLs (TOOLGATE_WEBHOOK_URLS, comma-separated) receive every
	// event of calls that ask a person, as signed JSON POSTs.
	WebhookURLs []string
	// WebhookSecret (TOOLGATE_WEBHOOK_SECRET) signs webhook events
	// (X-Toolgate-Signature); receivers check it with VerifyWebhook.
	// Required with webhooks.
	WebhookSecret string

	// LinkSecret (TOOLGATE_LINK_SECRET) is the HMAC key of email links;
	// every process that sends or accepts links needs the same one. When
	// unset and FromEnv is given a data directory, a secret is generated
	// and kept in <data-dir>/link-secret (fine for one process, such as
	// toolgate dev).
	LinkSecret []byte
}

// FromEnv reads the settings with getenv (os.Getenv) and loads the
// approvers file. dataDir is where a link secret may be generated when
// TOOLGATE_LINK_SECRET is unset and email is on; "" makes the variable
// required instead (for workers and listeners that must share it).
func FromEnv(getenv func(string) string, dataDir string) (Config, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	c := Config{
		SlackBotToken:      get(EnvSlackBotToken),
		SlackSigningSecret: get(EnvSlackSigningSecret),
		SlackChannel:       get(EnvSlackChannel),
		SlackAPIURL:        get(EnvSlackAPIURL),
		SMTPAddr:           get(EnvSMTPAddr),
		SMTPUsername:       get(EnvSMTPUsername),
		SMTPPassword:       getenv(EnvSMTPPassword), // a password may end in a space
		SMTPFrom:           get(EnvSMTPFrom),
		PublicURL:          get(EnvPublicURL),
		ApproversFile:      get(EnvApproversFile),
		WebhookSecret:      get(EnvWebhookSecret),
	}
	for _, u := range strings.Split(get(EnvWebhookURLs), ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.WebhookURLs = append(c.WebhookURLs, u)
		}
	}
	if s := get(EnvLinkSecret); s != "" {
		c.LinkSecret = []byte(s)
	} else if c.SMTPAddr != "" && dataDir != "" {
		secret, err := LoadOrCreateLinkSecret(dataDir)
		if err != nil {
			return c, err
		}
		c.LinkSecret = secret
	}
	if c.SlackAPIURL == "" {
		c.SlackAPIURL = DefaultSlackAPIURL
	}
	if c.ApproversFile != "" {
		a, err := LoadApprovers(c.ApproversFile)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvApproversFile, err)
		}
		c.Approvers = a
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// SlackEnabled reports whether Slack is configured.
func (c Config) SlackEnabled() bool {
	return c.SlackBotToken != "" || c.SlackChannel != "" || c.SlackSigningSecret != ""
}

// EmailEnabled reports whether email is configured.
func (c Config) EmailEnabled() bool { return c.SMTPAddr != "" }

// Validate checks that every channel has all or none of its settings, and
// that the values make sense. Each problem names the variable.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.SlackEnabled() {
		var missing []string
		for _, s := range []struct{ name, value string }{
			{EnvSlackBotToken, c.SlackBotToken}, {EnvSlackChannel, c.SlackChannel}, {EnvSlackSigningSecret, c.SlackSigningSecret},
		} {
			if s.value == "" {
				missing = append(missing, s.name)
			}
		}
		if len(missing) > 0 {
			bad("Slack needs %s, %s and %s together; %s not set", EnvSlackBotToken, EnvSlackChannel, EnvSlackSigningSecret, strings.Join(missing, " and "))
		}
		if c.SlackBotToken != "" && !strings.HasPrefix(c.SlackBotToken, "xox") {
			bad("%s does not look like a Slack token (xoxb-…)", EnvSlackBotToken)
		}
	}
	if c.SlackAPIURL != "" && c.SlackAPIURL != DefaultSlackAPIURL {
		if err := checkHTTPURL(c.SlackAPIURL); err != nil {
			bad("%s: %v", EnvSlackAPIURL, err)
		}
	}
	if c.EmailEnabled() {
		if _, _, err := net.SplitHostPort(c.SMTPAddr); err != nil {
			bad("%s %q must be host:port, e.g. smtp.example.com:587", EnvSMTPAddr, c.SMTPAddr)
		}
		if c.SMTPFrom == "" {
			bad("email needs %s (the sender, e.g. toolgate <toolgate@example.com>)", EnvSMTPFrom)
		} else if _, err := parseFrom(c.SMTPFrom); err != nil {
			bad("%s: %v", EnvSMTPFrom, err)
		}
		if c.PublicURL == "" {
			bad("email needs %s: the links in the messages point there", EnvPublicURL)
		}
		if len(c.LinkSecret) == 0 {
			bad("email needs %s (the key that signs email links; the same in every toolgate process)", EnvLinkSecret)
		}
	} else {
		for _, s := range []struct{ name, value string }{{EnvSMTPUsername, c.SMTPUsername}, {EnvSMTPPassword, c.SMTPPassword}, {EnvSMTPFrom, c.SMTPFrom}} {
			if s.value != "" {
				bad("%s is set but %s is not: set the mail server too, or unset it", s.name, EnvSMTPAddr)
			}
		}
	}
	if (c.SMTPUsername == "") != (c.SMTPPassword == "") {
		bad("%s and %s go together", EnvSMTPUsername, EnvSMTPPassword)
	}
	if len(c.LinkSecret) > 0 && len(c.LinkSecret) < MinLinkSecretBytes {
		bad("%s must be at least %d characters", EnvLinkSecret, MinLinkSecretBytes)
	}
	if c.PublicURL != "" {
		if err := checkHTTPURL(c.PublicURL); err != nil {
			bad("%s: %v", EnvPublicURL, err)
		}
	}
	if (c.SlackEnabled() || c.EmailEnabled()) && c.Approvers == nil {
		bad("Slack and email need %s: only the approvers it lists may decide through them", EnvApproversFile)
	}
	if len(c.WebhookURLs) > 0 && c.WebhookSecret == "" {
		bad("webhooks need %s to sign the events", EnvWebhookSecret)
	}
	if len(c.WebhookURLs) == 0 && c.WebhookSecret != "" {
		bad("%s is set but %s is not", EnvWebhookSecret, EnvWebhookURLs)
	}
	for _, u := range c.WebhookURLs {
		if err := checkHTTPURL(u); err != nil {
			bad("%s: %v", EnvWebhookURLs, err)
		}
	}
	return errors.Join(errs...)
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q carries credentials in the URL", u.Redacted())
	}
	return nil
}

// slackAPIURL returns the API base URL with the trailing slash the Slack
// client needs.
func (c Config) slackAPIURL() string {
	u := c.SlackAPIURL
	if u == "" {
		u = DefaultSlackAPIURL
	}
	if !strings.HasSuffix(u, "/") {
		u += "/"
	}
	return u
}

// slackTimeout bounds every Slack Web API request.
const slackTimeout = 10 * time.Second

// SlackClient returns a Slack Web API client with the bot token, the API
// URL and a request timeout.
func (c Config) SlackClient() *slack.Client {
	return slack.New(c.SlackBotToken, slack.OptionAPIURL(c.slackAPIURL()),
		slack.OptionHTTPClient(&http.Client{Timeout: slackTimeout}))
}

// LinkSigner returns the signer of email links, or nil when email is off.
func (c Config) LinkSigner() *LinkSigner {
	if len(c.LinkSecret) == 0 {
		return nil
	}
	s, err := NewLinkSigner(c.LinkSecret)
	if err != nil {
		return nil
	}
	return s
}

// Channels returns the configured channels, in the order Slack, email,
// webhook; none when nothing is configured.
func (c Config) Channels(logger *zap.Logger) ([]activities.Channel, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	var out []activities.Channel
	if c.SlackEnabled() {
		out = append(out, NewSlack(SlackOptions{
			API: c.SlackClient(), Channel: c.SlackChannel, PublicURL: c.PublicURL, Logger: logger.Named("slack"),
		}))
	}
	if c.EmailEnabled() {
		from, _ := parseFrom(c.SMTPFrom)
		out = append(out, NewEmail(EmailOptions{
			Addr: c.SMTPAddr, Username: c.SMTPUsername, Password: c.SMTPPassword, From: from,
			PublicURL: c.PublicURL, Approvers: c.Approvers, Links: c.LinkSigner(), Logger: logger.Named("email"),
		}))
	}
	if len(c.WebhookURLs) > 0 {
		out = append(out, NewWebhook(WebhookOptions{
			URLs: slices.Clone(c.WebhookURLs), Secret: c.WebhookSecret, PublicURL: c.PublicURL, Logger: logger.Named("webhook"),
		}))
	}
	return out, nil
}

// knownPrefixes are the prefixes of variables UnknownSettings checks.
var knownPrefixes = []string{"SLACK_", "SMTP_", "TOOLGATE_WEBHOOK", "TOOLGATE_LINK"}

// UnknownSettings returns a warning for each variable in environ (as
// os.Environ gives it) that looks like a notification setting but is not
// one, e.g. a misspelt SLACK_CHANEL. The binary may log them.
func UnknownSettings(environ []string) []string {
	known := []string{EnvSlackBotToken, EnvSlackSigningSecret, EnvSlackChannel, EnvSlackAPIURL, EnvSMTPAddr, EnvSMTPUsername,
		EnvSMTPPassword, EnvSMTPFrom, EnvWebhookURLs, EnvWebhookSecret, EnvLinkSecret}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(known, name) || !slices.ContainsFunc(knownPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		out = append(out, fmt.Sprintf("%s is not a toolgate setting (known: %s)", name, strings.Join(known, ", ")))
	}
	return out
}

// String describes the configuration with its secrets redacted, so a
// Config can be logged.
func (c Config) String() string {
	redact := func(s string) string {
		if s == "" {
			return ""
		}
		return "[redacted]"
	}
	return fmt.Sprintf("notify.Config{SlackBotToken:%s SlackSigningSecret:%s SlackChannel:%q SlackAPIURL:%q SMTPAddr:%q SMTPUsername:%q SMTPPassword:%s SMTPFrom:%q PublicURL:%q ApproversFile:%q WebhookURLs:%q WebhookSecret:%s LinkSecret:%s}",
		redact(c.SlackBotToken), redact(c.SlackSigningSecret), c.SlackChannel, c.SlackAPIURL, c.SMTPAddr, c.SMTPUsername,
		redact(c.SMTPPassword), c.SMTPFrom, c.PublicURL, c.ApproversFile, c.WebhookURLs, redact(c.WebhookSecret), redact(string(c.LinkSecret)))
}
