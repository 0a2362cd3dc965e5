package server

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
)

// Role is what a token may do.
type Role string

const (
	// RoleAgent submits calls and reads the calls it submitted.
	RoleAgent Role = "agent"
	// RoleApprover lists and decides waiting calls (limited to its groups
	// when a rule names groups) and manages sessions.
	RoleApprover Role = "approver"
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleAuditor reads: the decision ledger, every call, the waiting
	// lists and sessions, in the API and the inbox. It decides, cancels,
	// submits and changes nothing: every route that would refuses it.
	RoleAuditor Role = "auditor"
)

// Roles are the roles a token may have.
var Roles = []Role{RoleAgent, RoleApprover, RoleAdmin, RoleAuditor}

// Principal is who a request comes from: the token's name, never a name
// taken from the request body.
type Principal struct {
	Name   string
	Role   Role
	Groups []string
	// Owner, for an agent token, is the person running that agent: the
	// acting user of its calls, who may decide those whose rule says
	// `user: true`, in the agent's own client.
	Owner string
	// Identity, for a person signed in through the company's identity
	// provider, is who the provider says they are; it goes with every
	// decision they take.
	Identity *policy.Identity
}

// mayDecide reports whether p may decide a call asked of groups, for
// listings; the workflow itself checks every decision with the same rule.
func (p Principal) mayDecide(groups []string) bool {
	return p.Role != RoleAgent && p.Role != RoleAuditor && p.approver().MayAct(groups) == nil
}

// viewer is p as a reader of the waiting lists and sessions: an admin
// and an auditor see every group's calls, an approver those of its groups.
// It is never a decider: decisions go through approver, which an auditor
// never reaches (Decide and the routes refuse it first).
func (p Principal) viewer() policy.Approver {
	if p.Role == RoleAuditor {
		return policy.Approver{Name: p.Name, Groups: []string{"*"}}
	}
	return p.approver()
}

// approver is p as the workflows see a decider: an admin acts for every
// group.
func (p Principal) approver() policy.Approver {
	if p.Role == RoleAdmin {
		return policy.Approver{Name: p.Name, Groups: []string{"*"}, Identity: p.Identity}
	}
	return policy.Approver{Name: p.Name, Groups: p.Groups, Identity: p.Identity}
}

// Tokens maps bearer tokens, by their SHA-256 hash, to principals. Tokens
// themselves are never stored.
type Tokens struct {
	byHash map[string]Principal
	names  map[string]bool
}

// TokenEntry is one token in a tokens file.
type TokenEntry struct {
	Name string `yaml:"name"`
	Role Role   `yaml:"role"`
	// Groups are the approver groups of an approver; "*" is every group.
	Groups []string `yaml:"groups,omitempty"`
	// Owner, for an agent token, names the person running the agent
	// (Principal.Owner).
	Owner string `yaml:"owner,omitempty"`
	// SHA256 is the hex SHA-256 of the token (`toolgate token new` prints it).
	SHA256 string `yaml:"sha256"`
}

// HashToken returns the hex SHA-256 of a token, as stored in a tokens file.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// NewToken returns a random token.
func NewToken(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewTokens builds a token set from entries, checking each. A name is one
// principal: it may be listed again only for the same role, groups and
// owner (a second token for the same agent or person, while one is
// rotated). No token is named for toolgate itself (policy.ReservedNames),
// in any role or as an owner, and an owner is a person, never an agent
// token's name (it may be the person's own approver or admin name).
func NewTokens(entries []TokenEntry) (*Tokens, error) {
	t := &Tokens{byHash: map[string]Principal{}, names: map[string]bool{}}
	byName := map[string]int{} // name -> index of its first entry
	for i, e := range entries {
		if err := tgclient.ValidateID("name", e.Name); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
		switch {
		case !slices.Contains(Roles, e.Role):
			return nil, fmt.Errorf("token %q: role %q is not agent, approver, admin or auditor", e.Name, e.Role)
		case len(e.Groups) > 0 && e.Role == RoleAuditor:
			return nil, fmt.Errorf("token %q: groups are for approvers; an auditor reads every call and decides none", e.Name)
		case policy.IsReservedName(e.Name):
			return nil, fmt.Errorf("token %q: the name is toolgate's own (reserved: toolgate records %s itself as who decided or asked, so no token of any role may carry one)", e.Name, strings.Join(policy.ReservedNames, ", "))
		case e.Owner != "" && e.Role != RoleAgent:
			return nil, fmt.Errorf("token %q: owner is for agent tokens (the person running the agent); an %s decides as itself", e.Name, e.Role)
		case e.Owner != "" && tgclient.ValidateID("owner", e.Owner) != nil:
			return nil, fmt.Errorf("token %q: %w", e.Name, tgclient.ValidateID("owner", e.Owner))
		case e.Owner != "" && e.Owner == e.Name:
			return nil, fmt.Errorf("token %q: owner names the agent itself; it must name the person running it", e.Name)
		case policy.IsReservedName(e.Owner):
			return nil, fmt.Errorf("token %q: owner %q is reserved: the name is toolgate's own", e.Name, e.Owner)
		case len(e.SHA256) != 64:
			return nil, fmt.Errorf("token %q: sha256 must be 64 hex characters (see 'toolgate token new')", e.Name)
		}
		if j, seen := byName[e.Name]; seen && !samePrincipal(entries[j], e) {
			return nil, fmt.Errorf("token %q: the name is listed twice as different principals (%s); one name is one principal: give each its own name", e.Name, describeEntries(entries[j], e))
		} else if !seen {
			byName[e.Name] = i
		}
		h := strings.ToLower(e.SHA256)
		if _, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("token %q: the same token is listed twice", e.Name)
		}
		t.byHash[h] = Principal{Name: e.Name, Role: e.Role, Groups: e.Groups, Owner: e.Owner}
		t.names[strings.ToLower(e.Name)] = true
	}
	for _, e := range entries {
		if j, ok := byName[e.Owner]; ok && e.Owner != "" && entries[j].Role == RoleAgent {
			return nil, fmt.Errorf("token %q: owner %q is an agent token's name; an owner is the person running the agent", e.Name, e.Owner)
		}
	}
	return t, nil
}

// samePrincipal reports whether two entries of one name describe the same
// principal: the same role, groups (in any order) and owner.
func samePrincipal(a, b TokenEntry) bool {
	ga, gb := slices.Clone(a.Groups), slices.Clone(b.Groups)
	slices.Sort(ga)
	slices.Sort(gb)
	return a.Role == b.Role && a.Owner == b.Owner && slices.Equal(ga, gb)
}

func describeEntries(a, b TokenEntry) string {
	describe := func(e TokenEntry) string {
		d := string(e.Role)
		if len(e.Groups) > 0 {
			d += " of groups " + strings.Join(e.Groups, ",")
		}
		if e.Owner != "" {
			d += " owned by " + e.Owner
		}
		return d
	}
	return describe(a) + " and " + describe(b)
}

// tokensFile is the shape of a tokens file.
type tokensFile struct {
	Tokens []TokenEntry `yaml:"tokens"`
}

// LoadTokens reads a tokens file: `tokens: [{name, role, groups, sha256}]`.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	var file tokensFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := NewTokens(file.Tokens)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Lookup returns the principal of a bearer token.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	if t == nil || token == "" {
		return Principal{}, false
	}
	p, ok := t.byHash[HashToken(token)]
	return p, ok
}

// HasName reports whether a token is named name (compared without regard
// to case, as email addresses are). An agent token's owner is not a
// token's name: it is the person, who may well sign in as themselves.
func (t *Tokens) HasName(name string) bool {
	return t != nil && t.names[strings.ToLower(name)]
}

// DevTokens are the two tokens `toolgate dev` creates on first start.
type DevTokens struct {
	Agent    string `json:"agent"`
	Approver string `json:"approver"`
}

// Names of the dev tokens' principals.
const (
	DevAgentName    = "dev-agent"
	DevApproverName = "dev-approver"
	// DevUserName is the owner of the dev agent token: the person at the
	// agent, who decides the calls whose rule says `user: true`.
	DevUserName = "dev-user"
)

// LoadOrCreateDevTokens reads dataDir/tokens.json, creating it (mode 0600)
// with fresh tokens when absent, so a restart keeps them.
func LoadOrCreateDevTokens(dataDir string) (DevTokens, *Tokens, bool, error) {
	path := filepath.Join(dataDir, "tokens.json")
	var dt DevTokens
	created := false
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		dt = DevTokens{Agent: NewToken("tga_"), Approver: NewToken("tgp_")}
		data, _ = json.MarshalIndent(dt, "", "  ")
		if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
			return dt, nil, false, fmt.Errorf("write %s: %w", path, err)
		}
		created = true
	case err != nil:
		return dt, nil, false, fmt.Errorf("read %s: %w", path, err)
	default:
		if err := json.Unmarshal(data, &dt); err != nil || dt.Agent == "" || dt.Approver == "" {
			return dt, nil, false, fmt.Errorf("%s: want {\"agent\": \"...\", \"approver\": \"...\"}", path)
		}
	}
	tokens, err := NewTokens([]TokenEntry{
		{Name: DevAgentName, Role: RoleAgent, Owner: DevUserName, SHA256: HashToken(dt.Agent)},
		{Name: DevApproverName, Role: RoleApprover, Groups: []string{"*"}, SHA256: HashToken(dt.Approver)},
	})
	return dt, tokens, created, err
}

// MarshalTokens returns a tokens file holding entries, as LoadTokens reads
// it (`toolgate token new` prints it). Every value is quoted as YAML needs,
// so a group "*" or a name with ":" loads back as written.
func MarshalTokens(entries ...TokenEntry) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(tokensFile{entries}); err != nil {
		return nil, fmt.Errorf("encode tokens: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode tokens: %w", err)
	}
	return b.Bytes(), nil
}
