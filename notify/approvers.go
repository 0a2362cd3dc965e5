package notify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/policy"
)

// Approver is a person who may decide calls through Slack or an email
// link. Their identity in every decision is Name, never a Slack display
// name or an address typed into a form.
type Approver struct {
	// Name is the identity recorded with the approver's decisions. Required
	// and unique in the file.
	Name string `yaml:"name"`
	// Groups are the approver groups the person belongs to; "*" is every
	// group. A call whose rule names groups can only be decided by their
	// members; a call that names none, by every approver.
	Groups []string `yaml:"groups,omitempty"`
	// SlackUser is the person's Slack member ID (U0123ABCD; in Slack:
	// profile → ⋮ → Copy member ID). Optional, unique.
	SlackUser string `yaml:"slack_user,omitempty"`
	// Email is where approval emails go; links sent there decide as this
	// approver. Optional, unique (compared without regard to case).
	Email string `yaml:"email,omitempty"`
}

// Approvers is a loaded approvers file. It is immutable and safe for
// concurrent use.
type Approvers struct {
	list    []Approver
	bySlack map[string]int
	byEmail map[string]int
}

// slackUserPattern matches Slack member IDs (U…, or W… on Enterprise Grid).
var slackUserPattern = regexp.MustCompile(`^[UW][A-Z0-9_]{2,31}$`)

// LoadApprovers reads an approvers file:
//
//	approvers:
//	  - {name: alice, groups: [ops], slack_user: U0123ABCD, email: alice@example.com}
//
// Unknown keys, duplicate names, Slack IDs or addresses, and entries that
// can be reached neither by Slack nor by email are refused with the file
// and line.
func LoadApprovers(path string) (*Approvers, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read approvers file: %w", err)
	}
	return ParseApprovers(path, data)
}

// ParseApprovers parses an approvers file's content; name is used in error
// messages.
func ParseApprovers(name string, data []byte) (*Approvers, error) {
	var file struct {
		Approvers []yaml.Node `yaml:"approvers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty; want `approvers: [{name: alice, groups: [ops], slack_user: U0123ABCD, email: alice@example.com}]`", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	a := &Approvers{bySlack: map[string]int{}, byEmail: map[string]int{}}
	names := map[string]int{}
	var errs []error
	for _, n := range file.Approvers {
		at := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, args...)))
		}
		var ap Approver
		if err := n.Decode(&ap); err != nil {
			at("%v", strings.TrimPrefix(err.Error(), "yaml: "))
			continue
		}
		if err := strictKeys(&n); err != nil {
			at("%v", err)
			continue
		}
		ap.Name = strings.TrimSpace(ap.Name)
		ap.SlackUser = strings.TrimSpace(ap.SlackUser)
		ap.Email = strings.TrimSpace(ap.Email)
		if ap.Name == "" {
			at("approver has no name")
			continue
		}
		who := fmt.Sprintf("approver %q", ap.Name)
		if policy.IsReservedName(ap.Name) {
			at("%s: the name is toolgate's own (reserved: %s), so no approver may carry it", who, strings.Join(policy.ReservedNames, ", "))
			continue
		}
		if i, dup := names[ap.Name]; dup {
			at("%s is listed twice (first at line %d)", who, i)
			continue
		}
		names[ap.Name] = n.Line
		if ap.SlackUser == "" && ap.Email == "" {
			at("%s has neither slack_user nor email, so no channel can reach them", who)
		}
		if ap.SlackUser != "" && !slackUserPattern.MatchString(ap.SlackUser) {
			at("%s: slack_user %q is not a Slack member ID (like U0123ABCD; a display name or @handle will not do)", who, ap.SlackUser)
		}
		if ap.Email != "" {
			addr, err := mail.ParseAddress(ap.Email)
			if err != nil || addr.Address != ap.Email {
				at("%s: email %q is not a plain address like alice@example.com", who, ap.Email)
			}
		}
		for _, g := range ap.Groups {
			if strings.TrimSpace(g) == "" {
				at("%s has an empty group name", who)
			}
		}
		idx := len(a.list)
		if ap.SlackUser != "" {
			if j, dup := a.bySlack[ap.SlackUser]; dup {
				at("%s: slack_user %s is also %s's", who, ap.SlackUser, a.list[j].Name)
			}
			a.bySlack[ap.SlackUser] = idx
		}
		if ap.Email != "" {
			key := strings.ToLower(ap.Email)
			if j, dup := a.byEmail[key]; dup {
				at("%s: email %s is also %s's", who, ap.Email, a.list[j].Name)
			}
			a.byEmail[key] = idx
		}
		a.list = append(a.list, ap)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(a.list) == 0 {
		return nil, fmt.Errorf("%s: lists no approvers; want `approvers: [{name: alice, groups: [ops], slack_user: U0123ABCD, email: alice@example.com}]`", name)
	}
	return a, nil
}

// strictKeys refuses unknown keys in one approver entry: yaml.v3's
// KnownFields does not reach into nodes decoded later.
func strictKeys(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("an approver is a mapping like {name: alice, groups: [ops], email: alice@example.com}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; k {
		case "name", "groups", "slack_user", "email":
		default:
			return fmt.Errorf("unknown key %q (want name, groups, slack_user, email)", k)
		}
	}
	return nil
}

// NewApprovers builds an approver set from entries, as the file would.
func NewApprovers(entries []Approver) (*Approvers, error) {
	data, err := yaml.Marshal(map[string]any{"approvers": entries})
	if err != nil {
		return nil, err
	}
	return ParseApprovers("approvers", data)
}

// All returns every approver in file order.
func (a *Approvers) All() []Approver {
	if a == nil {
		return nil
	}
	return slices.Clone(a.list)
}

// BySlackUser returns the approver with the Slack member ID.
func (a *Approvers) BySlackUser(id string) (Approver, bool) {
	if a == nil || id == "" {
		return Approver{}, false
	}
	i, ok := a.bySlack[id]
	if !ok {
		return Approver{}, false
	}
	return a.list[i], true
}

// ByEmail returns the approver with the address, compared without regard
// to case.
func (a *Approvers) ByEmail(addr string) (Approver, bool) {
	if a == nil || addr == "" {
		return Approver{}, false
	}
	i, ok := a.byEmail[strings.ToLower(strings.TrimSpace(addr))]
	if !ok {
		return Approver{}, false
	}
	return a.list[i], true
}

// InGroups returns, in file order, the approvers who may decide a call
// asked of groups: members of any of them (or of "*"), or everyone when
// groups is empty.
func (a *Approvers) InGroups(groups []string) []Approver {
	if a == nil {
		return nil
	}
	var out []Approver
	for _, ap := range a.list {
		if ap.InAny(groups) {
			out = append(out, ap)
		}
	}
	return out
}

// InAny reports whether the approver may decide a call asked of groups:
// groups is empty, or the approver is in one of them or in "*".
func (ap Approver) InAny(groups []string) bool {
	if len(groups) == 0 {
		return true
	}
	return slices.ContainsFunc(ap.Groups, func(g string) bool { return g == "*" || slices.Contains(groups, g) })
}
