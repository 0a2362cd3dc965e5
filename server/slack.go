package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/notify"
	"github.com/toolgate/toolgate/workflows"
)

// SlackChannel is the channel Slack decisions record.
const SlackChannel = notify.ChannelSlack

// Slack interactivity: POST /slack/interactions receives button clicks and
// modal submissions. Every request is checked against the signing secret
// (Slack's v0 scheme) and refused with 401 when the signature is wrong or
// its timestamp is more than SlackMaxSkew away (a replay). A replay inside
// that window cannot decide twice: the first decision on a call wins and
// every later one is refused.
//
// Slack wants an answer within three seconds, so the handler answers 200
// at once and takes the decision in a goroutine bounded by
// slackDecisionTimeout. Refusals (not an approver, not in the call's
// groups, already decided, timed out) go back to the clicking user as an
// ephemeral message; a decision itself is shown when the call's workflow
// updates the message (notify.Slack.Resolve).
const (
	// SlackMaxSkew is how far a request's timestamp may be from now: the
	// five minutes Slack documents, which slack-go's verifier also checks.
	SlackMaxSkew = 5 * time.Minute
	// slackDecisionTimeout bounds the work after a click: the decision or
	// refusal and the answer to the user.
	slackDecisionTimeout = 30 * time.Second
	// maxSlackBody caps an interaction request; payloads are a few KiB.
	maxSlackBody = 1 << 20
)

// slackInteractions serves POST /slack/interactions.
type slackInteractions struct {
	people    *people
	calls     *tgclient.Client
	approvers *notify.Approvers
	secret    []byte
	api       *slack.Client
	http      *http.Client
	logger    *zap.Logger
	errs      *api
	now       func() time.Time
	// running counts the goroutines still working on clicks (for tests).
	running sync.WaitGroup
	// publicURL is the base of the links in messages; inboxURL of the
	// link to a call's page where a passkey can sign (passkeyInbox).
	publicURL, inboxURL string
}

// newSlackInteractions returns the endpoint, or nil when Slack is not
// configured.
func newSlackInteractions(cfg Config, signedIn *people) *slackInteractions {
	n := cfg.Notify
	if !n.SlackEnabled() {
		return nil
	}
	if err := n.Validate(); err != nil {
		cfg.Logger.Error("Slack interactions are off: the settings are incomplete", zap.Error(err))
		return nil
	}
	return &slackInteractions{
		calls:     cfg.Calls,
		approvers: n.Approvers,
		secret:    []byte(n.SlackSigningSecret),
		api:       n.SlackClient(),
		http:      &http.Client{Timeout: 10 * time.Second},
		logger:    cfg.Logger.Named("slack"),
		errs:      &api{calls: cfg.Calls, tokens: cfg.Tokens, logger: cfg.Logger},
		now:       time.Now,
		publicURL: n.PublicURL,
		inboxURL:  passkeyInbox(cfg, n.PublicURL),
		people:    signedIn,
	}
}

func (s *slackInteractions) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /slack/interactions", s.handle)
}

// Slack's signature headers.
const (
	slackSignatureHeader = "X-Slack-Signature"
	slackTimestampHeader = "X-Slack-Request-Timestamp"
)

var (
	errSlackUnsigned  = errors.New("missing or malformed Slack signature headers")
	errSlackStale     = errors.New("the request's timestamp is too old (or too far ahead): a replay?")
	errSlackSignature = errors.New("the request's signature does not match the signing secret")
)

// verifySlack checks a request the way Slack documents, with slack-go's
// SecretsVerifier: v0=HMAC-SHA256 of "v0:<timestamp>:<body>" under the
// signing secret, compared in constant time, with a timestamp within
// SlackMaxSkew of now. The headers and the timestamp are checked here
// first, against now, so that each refusal says what is wrong; slack-go
// then checks the same five minutes against the wall clock, and the
// signature.
func verifySlack(secret []byte, h http.Header, body []byte, now time.Time) error {
	ts, sig := h.Get(slackTimestampHeader), h.Get(slackSignatureHeader)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || !strings.HasPrefix(sig, "v0=") {
		return errSlackUnsigned
	}
	if d := now.Sub(time.Unix(sec, 0)); d > SlackMaxSkew || d < -SlackMaxSkew {
		return errSlackStale
	}
	v, err := slack.NewSecretsVerifier(h, string(secret))
	switch {
	case errors.Is(err, slack.ErrExpiredTimestamp):
		return errSlackStale
	case err != nil:
		// The signature is not hex, or not as long as a SHA-256.
		return errSlackSignature
	}
	if _, err := v.Write(body); err != nil || v.Ensure() != nil {
		return errSlackSignature
	}
	return nil
}

func (s *slackInteractions) handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSlackBody))
	if err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	if err := verifySlack(s.secret, r.Header, body, s.now()); err != nil {
		s.logger.Warn("Slack request refused", zap.String("remote", r.RemoteAddr), zap.Error(err))
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		http.Error(w, "want a form with a payload field", http.StatusBadRequest)
		return
	}
	var ic slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &ic); err != nil {
		s.logger.Warn("Slack payload not understood", zap.Error(err))
		http.Error(w, "payload is not an interaction", http.StatusBadRequest)
		return
	}
	switch ic.Type {
	case slack.InteractionTypeBlockActions:
		s.blockActions(w, ic)
	case slack.InteractionTypeViewSubmission:
		s.viewSubmission(w, ic)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// blockActions handles a button click.
func (s *slackInteractions) blockActions(w http.ResponseWriter, ic slack.InteractionCallback) {
	w.WriteHeader(http.StatusOK)
	if len(ic.ActionCallback.BlockActions) == 0 {
		return
	}
	a := ic.ActionCallback.BlockActions[0]
	callID, action, ok := notify.ParseSlackAction(a.BlockID, a.ActionID, a.Value)
	if !ok {
		s.logger.Debug("Ignored a Slack action that is not a toolgate button", zap.String("actionID", a.ActionID), zap.String("blockID", a.BlockID))
		return
	}
	reply := s.replier(ic.ResponseURL, ic.Channel.ID, ic.User.ID)
	p, ok := s.principal(ic.User.ID)
	if !ok {
		s.logger.Warn("Slack click by someone who is not an approver", zap.String("slackUser", ic.User.ID), zap.String("callID", callID))
		s.async(func(ctx context.Context) {
			reply(ctx, fmt.Sprintf(":no_entry: You (Slack user %s) are not in toolgate's approvers file, so you cannot decide call %s. Nothing was recorded.", ic.User.ID, callID))
		})
		return
	}
	if action == notify.SlackActionDenyWithReason {
		s.async(func(ctx context.Context) { s.openReasonModal(ctx, p, callID, ic, reply) })
		return
	}
	s.async(func(ctx context.Context) {
		if st := s.decide(ctx, p, callID, decisionRequest{Decision: action}, reply); st != nil {
			s.showCount(ctx, *st, ic.Channel.ID, ic.Message.Timestamp)
		}
	})
}

// showCount updates the clicked message of a four-eyes call that counted
// an approval: the same question and buttons, and how far it is. (The
// other channels' messages update at the decision.)
func (s *slackInteractions) showCount(ctx context.Context, st workflows.CallState, channel, ts string) {
	if channel == "" || ts == "" || st.Request == nil || st.Approvals == nil {
		return
	}
	n := activities.Notice{Kind: activities.NoticeWaiting, Call: st.Call, Request: *st.Request, Groups: st.Request.Groups, Deadline: st.Deadline}
	progress := approvalsText(st.Approvals) + "; waiting for another approver"
	_, _, _, err := s.api.UpdateMessageContext(ctx, channel, ts,
		slack.MsgOptionText(fmt.Sprintf("%s call %s: %s", st.Call.Tool, st.Call.ID, progress), false),
		slack.MsgOptionBlocks(notify.CountedBlocks(n, progress, s.publicURL)...))
	if err != nil {
		s.logger.Warn("Could not show the count on the Slack message", zap.String("callID", st.Call.ID), zap.Error(err))
	}
}

// openReasonModal opens the "deny with reason" modal, after checking that
// the approver may decide the call now (so nobody types a reason for
// nothing).
func (s *slackInteractions) openReasonModal(ctx context.Context, p Principal, callID string, ic slack.InteractionCallback, reply func(context.Context, string)) {
	if err := s.errs.checkDecidable(ctx, p, decisionRequest{CallID: callID, Decision: "deny"}, map[string]bool{}); err != nil {
		reply(ctx, ":warning: "+strings.TrimSuffix(asAPIError(s.errs.mapError(err)).message, ".")+". Nothing was recorded.")
		return
	}
	tool := ""
	if st, err := s.calls.Status(ctx, callID); err == nil && st.State != nil {
		tool = st.State.Call.Tool
	}
	if _, err := s.api.OpenViewContext(ctx, ic.TriggerID, notify.DenyReasonModal(callID, tool, ic.Channel.ID)); err != nil {
		s.logger.Warn("Could not open the reason modal", zap.String("callID", callID), zap.Error(err))
		reply(ctx, ":warning: Could not open the reason dialog ("+err.Error()+"); try again, or deny in the inbox.")
	}
}

// viewSubmission handles the reason modal's submission.
func (s *slackInteractions) viewSubmission(w http.ResponseWriter, ic slack.InteractionCallback) {
	if ic.View.CallbackID != notify.SlackDenyReasonCallback {
		w.WriteHeader(http.StatusOK)
		return
	}
	var meta notify.SlackModalMeta
	if err := json.Unmarshal([]byte(ic.View.PrivateMetadata), &meta); err != nil || meta.CallID == "" {
		s.logger.Warn("Reason modal without its call", zap.String("metadata", ic.View.PrivateMetadata))
		w.WriteHeader(http.StatusOK)
		return
	}
	reason := ""
	if ic.View.State != nil {
		reason = strings.TrimSpace(ic.View.State.Values[notify.SlackReasonBlock][notify.SlackReasonAction].Value)
	}
	if reason == "" {
		// Keeps the modal open with the message under the field.
		writeJSON(w, http.StatusOK, map[string]any{"response_action": "errors", "errors": map[string]string{
			notify.SlackReasonBlock: "Say why the call is denied: the agent reads it.",
		}})
		return
	}
	w.WriteHeader(http.StatusOK)
	reply := s.replier("", meta.Channel, ic.User.ID)
	p, ok := s.principal(ic.User.ID)
	if !ok {
		s.logger.Warn("Slack reason from someone who is not an approver", zap.String("slackUser", ic.User.ID), zap.String("callID", meta.CallID))
		s.async(func(ctx context.Context) {
			reply(ctx, fmt.Sprintf(":no_entry: You (Slack user %s) are not in toolgate's approvers file, so you cannot decide call %s. Nothing was recorded.", ic.User.ID, meta.CallID))
		})
		return
	}
	s.async(func(ctx context.Context) {
		s.decide(ctx, p, meta.CallID, decisionRequest{Decision: "deny", Reason: reason}, reply)
	})
}

// decide applies a decision through Decide, as every channel does; a
// refusal goes back to the user. It returns the call as it stands when the
// decision was an approval that a four-eyes call counted and still waits.
func (s *slackInteractions) decide(ctx context.Context, p Principal, callID string, req decisionRequest, reply func(context.Context, string)) *workflows.CallState {
	applied, err := Decide(ctx, s.calls, p, callID, req, SlackChannel)
	if err != nil {
		ae := asAPIError(s.errs.mapError(err))
		msg := ae.message
		if ae.code == "passkey_required" && s.inboxURL != "" {
			msg = strings.TrimSuffix(msg, ".") + ": " + s.inboxURL + callURL(callID)
		}
		s.logger.Info("Slack decision refused", zap.String("callID", callID), zap.String("approver", p.Name), zap.String("decision", req.Decision), zap.String("refusal", msg))
		reply(ctx, ":warning: "+strings.TrimSuffix(msg, ".")+". Nothing was recorded.")
		return nil
	}
	s.logger.Info("Decision", zap.String("callID", callID), zap.Stringer("decision", applied.Kind), zap.String("approver", p.Name), zap.String("channel", SlackChannel))
	st := countedState(ctx, s.calls, callID, applied)
	if st != nil {
		reply(ctx, fmt.Sprintf("Approval recorded: %d of %d approvals; the call waits for another approver.", len(st.Approvals.Given), st.Approvals.Needed))
	}
	return st
}

// principal maps a Slack member ID (never a display name) to an approver.
func (s *slackInteractions) principal(slackUser string) (Principal, bool) {
	ap, ok := s.approvers.BySlackUser(slackUser)
	if !ok {
		return Principal{}, false
	}
	return approverPrincipal(ap, s.people), true
}

// approverPrincipal is the identity a Slack or email approver decides
// with: their name and groups from the approvers file, and the identity
// of the person who signed in through the identity provider as their
// email address (or name), if someone has since the server started.
func approverPrincipal(ap notify.Approver, signedIn *people) Principal {
	id := signedIn.identity(ap.Email)
	if id == nil {
		id = signedIn.identity(ap.Name)
	}
	return Principal{Name: ap.Name, Role: RoleApprover, Groups: ap.Groups, Identity: id}
}

// replier answers the user who clicked, visible only to them: through the
// interaction's response_url when there is one, else chat.postEphemeral.
func (s *slackInteractions) replier(responseURL, channel, user string) func(context.Context, string) {
	return func(ctx context.Context, text string) {
		var err error
		switch {
		case responseURL != "":
			err = slack.PostWebhookCustomHTTPContext(ctx, responseURL, s.http, &slack.WebhookMessage{Text: text, ResponseType: slack.ResponseTypeEphemeral})
		case channel != "" && user != "":
			_, err = s.api.PostEphemeralContext(ctx, channel, user, slack.MsgOptionText(text, false))
		default:
			err = errors.New("no response_url or channel to answer in")
		}
		if err != nil {
			s.logger.Warn("Could not answer the Slack user", zap.String("slackUser", user), zap.Error(err))
		}
	}
}

// async runs f after the answer to Slack, with its own deadline: the
// request's context ends with the response.
func (s *slackInteractions) async(f func(ctx context.Context)) {
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), slackDecisionTimeout)
		defer cancel()
		f(ctx)
	}()
}
