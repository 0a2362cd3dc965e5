package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/registry"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
	"github.com/toolgate/toolgate/websession"
)

// The account pages: a signed-in person's passkeys, which they register
// (a WebAuthn registration ceremony, begun and finished by passkeys.js
// through two JSON posts) and remove (a form). Each registration and
// removal is a ledger entry (package registry).

// passkeysOff is what the pages say when this deployment offers no
// passkeys.
const passkeysOff = "Passkeys are off here: they need --public-url with a host name (not an IP address; toolgate dev offers them at http://localhost:PORT) and a decision ledger (--ledger)."

// passkeyCeremonyPrefix keeps a registration ceremony's state apart from
// the sign-ins in the session store.
const passkeyCeremonyPrefix = "passkey/"

// passkeyCeremonyTTL bounds a registration ceremony: the browser's prompt
// and the person's touch.
const passkeyCeremonyTTL = 5 * time.Minute

// maxPasskeyName bounds a passkey's label, in characters.
const maxPasskeyName = 64

// csrfHeader carries the session's CSRF token on the ceremony's JSON
// posts (a form carries it in its csrf field).
const csrfHeader = "X-CSRF-Token"

// passkeyPages are the account pages' settings: the registry and the
// relying party, or why there are none.
type passkeyPages struct {
	registry *registry.Registry
	rp       passkey.RelyingParty
	// webauthn runs the ceremonies; nil: passkeys are off.
	webauthn *webauthn.WebAuthn
}

func newPasskeyPages(cfg Config) *passkeyPages {
	p := &passkeyPages{registry: cfg.Passkeys, rp: cfg.PasskeyRP}
	if cfg.Passkeys == nil || cfg.PasskeyRP.ID == "" || len(cfg.PasskeyRP.Origins) == 0 {
		return p
	}
	wa, err := webauthn.New(&webauthn.Config{RPID: cfg.PasskeyRP.ID, RPDisplayName: "toolgate", RPOrigins: cfg.PasskeyRP.Origins,
		Timeouts: webauthn.TimeoutsConfig{Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: passkeyCeremonyTTL, TimeoutUVD: passkeyCeremonyTTL}}})
	if err != nil {
		cfg.Logger.Error("Passkeys off: the relying party is not one WebAuthn takes", zap.String("rpID", cfg.PasskeyRP.ID), zap.Error(err))
		return p
	}
	p.webauthn = wa
	return p
}

func init() {
	inboxPages["account"] = template.Must(template.New("account").Funcs(pageFuncs).ParseFS(webFS, "web/templates/layout.html", "web/templates/account.html"))
}

func (i *inbox) accountRoutes() []inboxRoute {
	return []inboxRoute{
		{"GET", "/account/passkeys", i.page(i.passkeysPage)},
		{"POST", "/account/passkeys/options", i.ceremony(i.passkeyOptions)},
		{"POST", "/account/passkeys", i.ceremony(i.passkeyRegister)},
		{"POST", "/account/passkeys/{id}/remove", i.change(i.passkeyRemove)},
	}
}

// passkeysView is the account page.
type passkeysView struct {
	// Off says why passkeys are off; empty when they are on.
	Off string
	// RPID is the site the passkeys are made for.
	RPID     string
	ReadOnly bool
	Passkeys []passkeyRow
}

// passkeyRow is one registered passkey.
type passkeyRow struct {
	Name      string
	Created   string
	ID        string
	Short     string
	Entry     int64
	RemoveURL string
}

func (i *inbox) passkeysPage(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	q := r.URL.Query()
	notice := ""
	switch {
	case q.Has("added"):
		notice = fmt.Sprintf("Added the passkey %q.", q.Get("added"))
	case q.Get("removed") != "":
		notice = fmt.Sprintf("Removed the passkey %q.", q.Get("removed"))
	case q.Has("removed"):
		notice = "Removed the passkey."
	}
	i.renderPasskeys(w, r, s, http.StatusOK, "", notice)
}

func (i *inbox) renderPasskeys(w http.ResponseWriter, r *http.Request, s *inboxSession, status int, msg, notice string) {
	view := passkeysView{RPID: i.passkeys.rp.ID, ReadOnly: s.principal.Role == RoleAuditor}
	if i.passkeys.webauthn == nil {
		view.Off = passkeysOff
	} else {
		regs, err := i.passkeys.registry.List(r.Context(), s.principal.Name)
		if err != nil {
			i.logger.Error("List passkeys", zap.String("approver", s.principal.Name), zap.Error(err))
			i.renderError(w, s, http.StatusInternalServerError, "The passkeys could not be read; see the server log.")
			return
		}
		for _, reg := range regs {
			id := passkey.IDString(reg.Credential.ID)
			view.Passkeys = append(view.Passkeys, passkeyRow{Name: reg.Name, Created: clock(reg.Registered), ID: id, Short: short(id),
				Entry: reg.Entry, RemoveURL: "/account/passkeys/" + url.PathEscape(id) + "/remove"})
		}
	}
	d := i.pageData(s, "Passkeys", view)
	d.Error, d.Notice = msg, notice
	i.render(w, status, "account", d)
}

// short is a credential ID's first characters, for a glance.
func short(id string) string {
	if len(id) <= 12 {
		return id
	}
	return id[:12] + "…"
}

// ceremony serves a JSON post of passkeys.js: from a signed-in person
// (401 otherwise), with the session's CSRF token in its X-CSRF-Token
// header, never from an auditor, and only where passkeys are on.
func (i *inbox) ceremony(h inboxHandler) http.Handler {
	return crossOrigin.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := i.sessionOrError(r)
		switch {
		case errors.Is(err, errNoSession):
			writeError(w, &apiError{http.StatusUnauthorized, "unauthorized", "sign in to the inbox first"})
			return
		case err != nil:
			writeError(w, errSessionsUnavailable)
			return
		case s.principal.Role == RoleAuditor:
			i.logger.Info("Passkey request refused: auditors read only", zap.String("approver", s.principal.Name), zap.String("path", r.URL.Path))
			e := *errReadOnly(s.principal.Name)
			e.message += ". Nothing was done."
			writeError(w, &e)
			return
		case !validCSRF(r.Header.Get(csrfHeader), s.csrf):
			i.logger.Warn("Passkey request refused: missing or wrong CSRF token", zap.String("approver", s.principal.Name), zap.String("path", r.URL.Path))
			writeError(w, &apiError{http.StatusForbidden, "csrf", "this request did not come from the passkeys page (its CSRF token is missing or wrong): reload the page"})
			return
		case i.passkeys.webauthn == nil:
			writeError(w, &apiError{http.StatusNotFound, "passkeys_off", passkeysOff})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		h(w, r, s)
	}))
}

// passkeyUser is a person as WebAuthn names them. Their user handle is
// a hash of their name: the same on every ceremony and replica, and
// without the name itself, which an authenticator may show or sync.
type passkeyUser struct {
	name  string
	creds []webauthn.Credential
}

func (u passkeyUser) WebAuthnID() []byte {
	sum := sha256.Sum256([]byte("toolgate passkey user\x00" + u.name))
	return sum[:]
}
func (u passkeyUser) WebAuthnName() string                       { return u.name }
func (u passkeyUser) WebAuthnDisplayName() string                { return u.name }
func (u passkeyUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

var _ webauthn.User = passkeyUser{}

// passkeyCeremony is a registration in progress, as the session store
// keeps it. It is kept there, keyed by the sign-in session, rather than
// in this process's memory: with a database store (Config.Sessions) the
// finish may reach another replica than the begin did, and Take makes
// its challenge good for one finish only.
type passkeyCeremony struct {
	Person  string               `json:"person"`
	Session webauthn.SessionData `json:"session"`
}

// passkeyOptions begins a registration: the creation options for the
// browser's navigator.credentials.create, with user verification
// required, a discoverable credential preferred, and the person's
// passkeys excluded (an authenticator is registered once).
func (i *inbox) passkeyOptions(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	ctx := r.Context()
	regs, err := i.passkeys.registry.List(ctx, s.principal.Name)
	if err != nil {
		i.logger.Error("List passkeys", zap.String("approver", s.principal.Name), zap.Error(err))
		writeError(w, err)
		return
	}
	exclude := make([]protocol.CredentialDescriptor, len(regs))
	for n, reg := range regs {
		exclude[n] = protocol.CredentialDescriptor{Type: protocol.PublicKeyCredentialType, CredentialID: reg.Credential.ID}
	}
	creation, sd, err := i.passkeys.webauthn.BeginRegistration(passkeyUser{name: s.principal.Name},
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationRequired}),
		webauthn.WithExclusions(exclude))
	if err != nil {
		i.logger.Error("Begin passkey registration", zap.String("approver", s.principal.Name), zap.Error(err))
		writeError(w, err)
		return
	}
	data, err := json.Marshal(passkeyCeremony{Person: s.principal.Name, Session: *sd})
	if err != nil {
		writeError(w, err)
		return
	}
	// A new ceremony replaces one the person began and left.
	key, store := passkeyCeremonyPrefix+s.id, i.sessions.store
	if err := store.Delete(ctx, key); err != nil {
		writeError(w, errSessionsUnavailable)
		return
	}
	if err := store.Create(ctx, key, data, i.now().Add(passkeyCeremonyTTL)); err != nil {
		i.logger.Error("Keep passkey ceremony", zap.String("approver", s.principal.Name), zap.Error(err))
		writeError(w, errSessionsUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, creation)
}

// passkeyRegistration is what passkeys.js posts to finish: the label
// and the browser's PublicKeyCredential, in WebAuthn's JSON.
type passkeyRegistration struct {
	Name       string          `json:"name"`
	Credential json.RawMessage `json:"credential"`
}

// passkeyRegister finishes a registration: it checks the browser's
// credential against the ceremony begun (challenge, origin, relying
// party, user presence and verification), then registers it.
func (i *inbox) passkeyRegister(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	ctx := r.Context()
	var req passkeyRegistration
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, badRequest("body", "must be JSON: {\"name\": ..., \"credential\": ...}"))
		return
	}
	name := strings.TrimSpace(req.Name)
	switch {
	case name == "":
		writeError(w, badRequest("name", "is required: name the passkey (e.g. \"laptop\" or \"YubiKey 5\")"))
		return
	case utf8.RuneCountInString(name) > maxPasskeyName:
		writeError(w, badRequest("name", fmt.Sprintf("is over %d characters", maxPasskeyName)))
		return
	}
	stored, err := i.sessions.store.Take(ctx, passkeyCeremonyPrefix+s.id)
	if errors.Is(err, websession.ErrNotFound) {
		writeError(w, &apiError{http.StatusBadRequest, "no_ceremony", "no passkey registration is in progress (or it took over 5 minutes): add the passkey again"})
		return
	}
	if err != nil {
		writeError(w, errSessionsUnavailable)
		return
	}
	var c passkeyCeremony
	if err := json.Unmarshal(stored.Data, &c); err != nil || c.Person != s.principal.Name {
		writeError(w, &apiError{http.StatusBadRequest, "no_ceremony", "the passkey registration in progress is not this person's: add the passkey again"})
		return
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(req.Credential)
	if err != nil {
		writeError(w, &apiError{http.StatusBadRequest, "invalid_passkey", "the browser's passkey could not be read: " + webauthnDetail(err)})
		return
	}
	cred, err := i.passkeys.webauthn.CreateCredential(passkeyUser{name: s.principal.Name}, c.Session, parsed)
	if err != nil {
		i.logger.Info("Passkey registration refused", zap.String("approver", s.principal.Name), zap.Error(err))
		writeError(w, &apiError{http.StatusBadRequest, "invalid_passkey", "the passkey does not check: " + webauthnDetail(err)})
		return
	}
	reg := registry.Registration{Name: name, Identity: statementIdentity(s.principal),
		Credential: passkey.Credential{ID: cred.ID, PublicKey: cred.PublicKey, Person: s.principal.Name, RPID: i.passkeys.rp.ID}}
	st, err := i.calls.Sign(policy.PasskeyStatement(statement.RegisterPasskey, passkey.IDString(cred.ID), s.principal.approver(), InboxChannel))
	if err != nil {
		i.logger.Error("Could not sign a passkey's registration", zap.Error(err))
		writeError(w, &apiError{http.StatusInternalServerError, "internal", "the passkey could not be registered: this toolgate has no door key to vouch for you"})
		return
	}
	reg, err = i.passkeys.registry.Register(ctx, reg, st)
	switch {
	case errors.Is(err, registry.ErrTaken):
		writeError(w, &apiError{http.StatusConflict, "passkey_taken", err.Error()})
		return
	case err != nil:
		i.logger.Error("Register passkey", zap.String("approver", s.principal.Name), zap.Error(err))
		writeError(w, err)
		return
	}
	id := passkey.IDString(reg.Credential.ID)
	i.logger.Info("Passkey registered", zap.String("approver", s.principal.Name), zap.String("credential", id), zap.String("channel", InboxChannel))
	writeJSON(w, http.StatusCreated, map[string]any{"credential_id": id, "name": reg.Name, "entry": reg.Entry,
		"url": "/account/passkeys?added=" + url.QueryEscape(reg.Name)})
}

// statementIdentity is p's identity provider's name for them, if any.
func statementIdentity(p Principal) *statement.Identity {
	if p.Identity == nil {
		return nil
	}
	return &statement.Identity{Issuer: p.Identity.Issuer, Subject: p.Identity.Subject}
}

// webauthnDetail is go-webauthn's reason for err, without its wrapping.
func webauthnDetail(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		if pe.DevInfo != "" {
			return pe.Details + ": " + pe.DevInfo
		}
		return pe.Details
	}
	return err.Error()
}

// passkeyRemove removes one of the person's passkeys: only theirs.
func (i *inbox) passkeyRemove(w http.ResponseWriter, r *http.Request, s *inboxSession) {
	if i.passkeys.webauthn == nil {
		i.renderPasskeys(w, r, s, http.StatusNotFound, passkeysOff, "")
		return
	}
	id, err := base64.RawURLEncoding.DecodeString(r.PathValue("id"))
	if err != nil || len(id) == 0 {
		i.renderPasskeys(w, r, s, http.StatusBadRequest, "That is not a passkey's credential ID.", "")
		return
	}
	// A removed one is removed again: its removal's entry is logged (once)
	// even if the first removal failed to log it.
	reg, err := i.passkeys.registry.Lookup(r.Context(), s.principal.Name, id)
	if err == nil || errors.Is(err, registry.ErrRemoved) {
		var st *statement.Signed
		if st, err = i.calls.Sign(policy.PasskeyStatement(statement.RemovePasskey, passkey.IDString(id), s.principal.approver(), InboxChannel)); err == nil {
			err = i.passkeys.registry.Remove(r.Context(), s.principal.Name, id, st)
		}
	}
	switch {
	case errors.Is(err, registry.ErrUnknown):
		i.renderPasskeys(w, r, s, http.StatusNotFound, fmt.Sprintf("That is not a passkey registered to %s.", s.principal.Name), "")
		return
	case err != nil:
		i.logger.Error("Remove passkey", zap.String("approver", s.principal.Name), zap.Error(err))
		i.renderPasskeys(w, r, s, http.StatusInternalServerError, "The passkey could not be removed; see the server log.", "")
		return
	}
	i.logger.Info("Passkey removed", zap.String("approver", s.principal.Name), zap.String("credential", passkey.IDString(id)), zap.String("channel", InboxChannel))
	http.Redirect(w, r, "/account/passkeys?removed="+url.QueryEscape(reg.Name), http.StatusSeeOther)
}
