package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/visible"
)

// SlackOptions configure the Slack channel.
type SlackOptions struct {
	// API is the Web API client (Config.SlackClient). Required.
	API *slack.Client
	// Channel is where notices are posted: an ID or #name. Required.
	Channel string
	// PublicURL, when set, adds a link to the call's inbox page. Optional.
	PublicURL string
	// Logger; nil means no logs.
	Logger *zap.Logger
}

// Slack posts notices as Block Kit messages with one button per decision,
// and updates them in place when the call is decided or times out.
type Slack struct {
	opts SlackOptions
}

var _ activities.Channel = (*Slack)(nil)

// NewSlack returns the Slack channel.
func NewSlack(opts SlackOptions) *Slack {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Slack{opts: opts}
}

// Name returns ChannelSlack.
func (s *Slack) Name() string { return ChannelSlack }

// Receipt refs of a Slack message.
const (
	RefSlackChannel = "channel"
	RefSlackTS      = "ts"
)

// Notify posts the notice to the channel and returns the message's channel
// ID and timestamp.
func (s *Slack) Notify(ctx context.Context, n activities.Notice) (activities.Receipt, error) {
	ch, ts, err := s.opts.API.PostMessageContext(ctx, s.opts.Channel,
		slack.MsgOptionText(noticeFallback(n), false),
		slack.MsgOptionBlocks(NoticeBlocks(n, s.opts.PublicURL)...),
		slack.MsgOptionDisableLinkUnfurl(),
	)
	if err != nil {
		return activities.Receipt{}, slackError("post the notice to "+s.opts.Channel, err)
	}
	s.opts.Logger.Info("Posted to Slack", zap.String("callID", n.Call.ID), zap.String("kind", string(n.Kind)), zap.String("slackChannel", ch), zap.String("ts", ts))
	return activities.Receipt{Channel: ChannelSlack, Ref: map[string]string{RefSlackChannel: ch, RefSlackTS: ts}}, nil
}

// Resolve updates every message of the receipts in place to show the
// outcome, without buttons. Executions are not shown: the decision is what
// the message asked for.
func (s *Slack) Resolve(ctx context.Context, o activities.Outcome, receipts []activities.Receipt) error {
	if o.Event != activities.EventDecided && o.Event != activities.EventTimedOut {
		return nil
	}
	blocks := OutcomeBlocks(o, s.opts.PublicURL)
	var errs []error
	for _, r := range receipts {
		ch, ts := r.Ref[RefSlackChannel], r.Ref[RefSlackTS]
		if ch == "" || ts == "" {
			continue
		}
		_, _, _, err := s.opts.API.UpdateMessageContext(ctx, ch, ts,
			slack.MsgOptionText(escape(visible.Line(fmt.Sprintf("%s call %s: %s", o.Call.Tool, o.Call.ID, outcomeText(o)))), false),
			slack.MsgOptionBlocks(blocks...),
		)
		var se slack.SlackErrorResponse
		switch {
		case err == nil:
		case errors.As(err, &se) && slices.Contains(goneMessageErrors, se.Err):
			// Deleted by someone, or the channel is gone: nothing to update.
			s.opts.Logger.Warn("Slack message can no longer be updated", zap.String("callID", o.Call.ID), zap.String("ts", ts), zap.String("error", se.Err))
		default:
			errs = append(errs, slackError("update message "+ts, err))
		}
	}
	return errors.Join(errs...)
}

// goneMessageErrors are chat.update errors that a retry cannot fix.
var goneMessageErrors = []string{"message_not_found", "channel_not_found", "cant_update_message", "is_archived", "edit_window_closed"}

// permanentSlackErrors mean the settings are wrong: retrying cannot help.
var permanentSlackErrors = []string{"invalid_auth", "not_authed", "account_inactive", "token_revoked", "channel_not_found",
	"not_in_channel", "is_archived", "missing_scope", "invalid_blocks", "invalid_blocks_format"}

// ErrTypeSlackRefused is the application error type of a Slack error that
// retries cannot fix (a bad token, an unknown channel, a missing scope).
const ErrTypeSlackRefused = "SlackRefused"

// slackError wraps a Slack error with what was being done; settings errors
// are non-retryable application errors.
func slackError(doing string, err error) error {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && slices.Contains(permanentSlackErrors, se.Err) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("slack: %s: %s (check the bot token, its scopes and SLACK_CHANNEL)", doing, se.Err), ErrTypeSlackRefused, err)
	}
	return fmt.Errorf("slack: %s: %w", doing, err)
}

// noticeFallback is the notification text (and what clients without Block
// Kit show). Slack reads it as mrkdwn, so it is escaped like the blocks.
func noticeFallback(n activities.Notice) string {
	s := headline(n) + " — call " + n.Call.ID + " in session " + n.Call.Session
	if n.Request.Message != "" {
		s += ": " + n.Request.Message
	}
	return escape(visible.Line(s))
}

// Block Kit identifiers. The actions block of a notice is
// SlackBlockPrefix+callID; each button's action_id is its decision and its
// value the call ID, so a click names both the call and the decision.
const (
	SlackBlockPrefix = "toolgate_call:"
	// SlackActionDenyWithReason opens a modal that asks for the reason.
	SlackActionDenyWithReason = "deny_with_reason"
	// SlackDenyReasonCallback is the callback_id of that modal.
	SlackDenyReasonCallback = "toolgate_deny_reason"
	// SlackReasonBlock and SlackReasonAction name the modal's reason input.
	SlackReasonBlock  = "reason"
	SlackReasonAction = "reason"
)

// slackButtons are the buttons of a notice, in order: the four decisions
// of LinkDecisions and "Deny with reason".
var slackButtons = []struct {
	action, label string
	style         slack.Style
	confirm       string
}{
	{"approve", "Approve", slack.StylePrimary, ""},
	{"approve_for_session", "Approve for session", slack.StyleDefault, "Approve this call and every later call of this tool in the session, without asking again?"},
	{"deny", "Deny", slack.StyleDanger, ""},
	{"deny_always", "Deny always", slack.StyleDanger, "Deny this call and every later call of this tool in the session?"},
	{SlackActionDenyWithReason, "Deny with reason…", slack.StyleDefault, ""},
}

// ParseSlackAction reads a button click: the call it names and the action
// (approve, approve_for_session, deny, deny_always or deny_with_reason).
// ok is false for anything that is not a toolgate button, or whose block
// and value disagree about the call.
func ParseSlackAction(blockID, actionID, value string) (callID, action string, ok bool) {
	callID, found := strings.CutPrefix(blockID, SlackBlockPrefix)
	if !found || callID == "" || (value != "" && value != callID) {
		return "", "", false
	}
	for _, b := range slackButtons {
		if b.action == actionID {
			return callID, actionID, true
		}
	}
	return "", "", false
}

// CountedBlocks is the message of a four-eyes call that counted an
// approval and waits for more: the notice's, buttons and all, with how far
// it is (progress, e.g. "1 of 2 approvals: alice via slack") under its
// header.
func CountedBlocks(n activities.Notice, progress, publicURL string) []slack.Block {
	blocks := NoticeBlocks(n, publicURL)
	counted := slack.NewSectionBlock(mrkdwn(":ballot_box_with_check: *"+escape(progress)+"*"), nil, nil)
	return slices.Insert(blocks, 1, slack.Block(counted))
}

// NoticeBlocks is the Block Kit message of a notice: what is asked, the
// call's facts, its abridged arguments and the decision buttons.
func NoticeBlocks(n activities.Notice, publicURL string) []slack.Block {
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(cut(headline(n), 150))),
	}
	if note := kindNote(n); note != "" {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(":bell: *"+escape(note)+"*"), nil, nil))
	}
	if m := n.Request.Message; m != "" {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(cut(escape(visible.Text(m)), 2900)), nil, nil))
	}
	askedOf := "any approver"
	if len(n.Groups) > 0 {
		askedOf = strings.Join(n.Groups, ", ")
	}
	fields := []*slack.TextBlockObject{
		mrkdwn("*Tool*\n`" + escape(n.Call.Tool) + "`"),
		mrkdwn("*Call*\n`" + escape(n.Call.ID) + "`"),
		mrkdwn("*Session*\n`" + escape(n.Call.Session) + "`"),
		mrkdwn("*Deadline*\n" + slackDate(n.Deadline)),
		mrkdwn("*Asked of*\n" + escape(askedOf)),
	}
	if n.Call.Requester != "" {
		fields = append(fields, mrkdwn("*Requested by*\n"+escape(n.Call.Requester)))
	}
	if n.Request.Rule != "" {
		fields = append(fields, mrkdwn("*Rule*\n"+escape(n.Request.Rule)))
	}
	if need := n.Request.Approvals; need > 1 {
		fields = append(fields, mrkdwn(fmt.Sprintf("*Approvals*\n%d people must approve (four eyes)", need)))
	}
	if user := policy.DecidersOf(n.Call, n.Request, nil).User; user != "" {
		fields = append(fields, mrkdwn("*Also asked of*\n"+escape(user)+", who runs the agent, in its client"))
	}
	blocks = append(blocks, slack.NewSectionBlock(nil, fields, nil))
	if p := n.Request.Preview; p != nil {
		blocks = append(blocks, previewBlock(*p, callPageURL(publicURL, n.Call.ID)))
	}
	blocks = append(blocks, argsBlock(n.Call.Args))
	var buttons []slack.BlockElement
	for _, b := range slackButtons {
		btn := slack.NewButtonBlockElement(b.action, n.Call.ID, plain(b.label))
		if b.style != slack.StyleDefault {
			btn = btn.WithStyle(b.style)
		}
		if b.confirm != "" {
			btn = btn.WithConfirm(slack.NewConfirmationBlockObject(plain("Are you sure?"), plain(b.confirm), plain("Yes"), plain("Cancel")))
		}
		buttons = append(buttons, btn)
	}
	blocks = append(blocks, slack.NewActionBlock(SlackBlockPrefix+n.Call.ID, buttons...))
	footer := fmt.Sprintf("toolgate · notice %d", n.Seq)
	if u := callPageURL(publicURL, n.Call.ID); u != "" {
		footer += " · <" + u + "|open in the inbox>"
	}
	blocks = append(blocks, slack.NewContextBlock("", mrkdwn(footer)))
	return blocks
}

// OutcomeBlocks replaces a notice once the call is decided or timed out:
// the outcome, who, via which channel and when; no buttons.
func OutcomeBlocks(o activities.Outcome, publicURL string) []slack.Block {
	icon, title := ":white_check_mark:", "Approved"
	switch {
	case o.Event == activities.EventTimedOut:
		icon, title = ":hourglass:", "Timed out"
	case strings.HasPrefix(o.Decision, "denied"):
		icon, title = ":no_entry:", "Denied"
	}
	line := fmt.Sprintf("%s *%s* — %s, at %s", icon, title, escape(outcomeText(o)), slackDate(o.At))
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(cut(title+": "+o.Call.Tool, 150))),
		slack.NewSectionBlock(mrkdwn(line), nil, nil),
	}
	if o.Reason != "" {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn("*Reason*\n"+cut(escape(visible.Text(o.Reason)), 2900)), nil, nil))
	}
	blocks = append(blocks,
		slack.NewSectionBlock(nil, []*slack.TextBlockObject{
			mrkdwn("*Tool*\n`" + escape(o.Call.Tool) + "`"),
			mrkdwn("*Call*\n`" + escape(o.Call.ID) + "`"),
			mrkdwn("*Session*\n`" + escape(o.Call.Session) + "`"),
		}, nil),
		argsBlock(o.Call.Args),
	)
	footer := "toolgate · updated when the call was " + strings.ToLower(title)
	if u := callPageURL(publicURL, o.Call.ID); u != "" {
		footer += " · <" + u + "|open in the inbox>"
	}
	return append(blocks, slack.NewContextBlock("", mrkdwn(footer)))
}

// maxPreviewShown is how much of a preview a Slack message shows (a
// section holds 3,000 characters).
const maxPreviewShown = 2400

// previewBlock is a notice's preview as a code block (Slack wraps its long
// lines), what a screen would obey or hide escaped, cut with a link to
// the inbox when long.
func previewBlock(p policy.Preview, inboxURL string) slack.Block {
	text := visible.Text(p.Text)
	left := utf8.RuneCountInString(text) - maxPreviewShown
	if left > 0 {
		text = visible.Cut(text, maxPreviewShown)
	}
	s := "*" + p.Heading() + "*\n```" + strings.ReplaceAll(escape(text), "```", "`\u200b``") + "```"
	if left > 0 || p.Truncated {
		s += "\n_cut short_"
		if inboxURL != "" {
			s += ": <" + inboxURL + "|the whole preview in the inbox>"
		}
	}
	return slack.NewSectionBlock(mrkdwn(s), nil, nil)
}

func argsBlock(args []byte) slack.Block {
	a := strings.ReplaceAll(escape(argsText(args)), "```", "`\u200b``")
	return slack.NewSectionBlock(mrkdwn("*Arguments*\n```"+a+"```"), nil, nil)
}

// SlackModalMeta is the private metadata of the deny-with-reason modal:
// where the click came from, to answer there. Identity never comes from
// it: the submitting user is mapped again.
type SlackModalMeta struct {
	CallID  string `json:"call_id"`
	Channel string `json:"channel,omitempty"`
}

// DenyReasonModal is the modal "Deny with reason…" opens.
func DenyReasonModal(callID, tool, channel string) slack.ModalViewRequest {
	meta := fmt.Sprintf(`{"call_id":%q,"channel":%q}`, callID, channel)
	input := slack.NewPlainTextInputBlockElement(plain("Why is this call denied?"), SlackReasonAction).
		WithMultiline(true).WithMaxLength(2000)
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      SlackDenyReasonCallback,
		Title:           plain("Deny with reason"),
		Submit:          plain("Deny"),
		Close:           plain("Cancel"),
		PrivateMetadata: meta,
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewSectionBlock(mrkdwn(fmt.Sprintf("Deny `%s` call `%s`. The reason goes back to the agent as the tool's result.", escape(tool), escape(callID))), nil, nil),
			slack.NewInputBlock(SlackReasonBlock, plain("Reason"), nil, input),
		}},
	}
}

// slackDate renders an instant in each reader's own time zone, with a UTC
// fallback.
func slackDate(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time_secs}|%s>", t.Unix(), utc(t))
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

// escape makes text safe in mrkdwn: no mentions, links or channel pings
// from an agent's arguments.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// cut shortens s to at most n bytes, on a rune boundary, ending in "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := max(n-len("…"), 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
