package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/passkey/registry"
)

// passkeyRelyingParty is who people's passkeys are made for: the public
// URL's host name and origin. toolgate dev, without a public URL (or with
// one at an IP address), offers them at http://localhost:PORT, its
// listener's port. why says what is missing when there is none.
func passkeyRelyingParty(publicURL string, devListener net.Listener) (rp passkey.RelyingParty, why string) {
	if publicURL != "" {
		u, err := url.Parse(publicURL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "":
			return rp, fmt.Sprintf("--public-url %q is not an http(s) URL", publicURL)
		case net.ParseIP(u.Hostname()) == nil:
			return passkey.RelyingParty{ID: u.Hostname(), Origins: []string{u.Scheme + "://" + u.Host}}, ""
		case devListener == nil:
			return rp, fmt.Sprintf("--public-url %s is at an IP address, and browsers make passkeys only for a host name", publicURL)
		}
	}
	if devListener == nil {
		return rp, "no --public-url (the URL people open toolgate at)"
	}
	_, port, err := net.SplitHostPort(devListener.Addr().String())
	if err != nil {
		return rp, err.Error()
	}
	return passkey.RelyingParty{ID: "localhost", Origins: []string{"http://localhost:" + port}}, ""
}

// devPasskeysNote is toolgate dev's banner line on passkeys.
func devPasskeysNote(lf ledgerFlags, publicURL string, httpListener net.Listener) string {
	if httpListener == nil {
		return ""
	}
	if lf.dsn == "" || lf.dsn == ledgerOff {
		return "  passkeys   off: they are kept in the ledger\n"
	}
	rp, why := passkeyRelyingParty(publicURL, httpListener)
	if why != "" {
		return "  passkeys   off: " + why + "\n"
	}
	return fmt.Sprintf("  passkeys   %s/account/passkeys  (open the inbox at %s to add one: browsers make none for an IP address)\n", rp.Origins[0], rp.Origins[0])
}

// openPasskeys opens the registry of passkeys in the ledger's database,
// for the relying party of the public URL (dev: localhost at its
// listener's port); nil without a ledger or a relying party (said in the
// log).
func (a *app) openPasskeys(ctx context.Context, p processes, lg *ledger.Ledger) (*registry.Registry, passkey.RelyingParty, error) {
	if lg == nil {
		return nil, passkey.RelyingParty{}, nil
	}
	publicURL, devListener := "", net.Listener(nil)
	switch {
	case p.signIn != nil:
		publicURL = p.signIn.publicURL
	case p.worker != nil:
		publicURL = p.worker.publicURL
	}
	if p.dev {
		devListener = p.httpListener
	}
	rp, why := passkeyRelyingParty(publicURL, devListener)
	if why != "" {
		a.logger.Info("Passkeys off: " + why)
		return nil, rp, nil
	}
	reg, err := registry.Open(ctx, p.ledger.dsn, lg, a.logger.Named("passkeys"))
	if err != nil {
		return nil, rp, err
	}
	a.logger.Info("Passkeys on", zap.String("rpID", rp.ID), zap.Strings("origins", rp.Origins))
	return reg, rp, nil
}

// workerPasskeys is the registry as the worker's VerifyPasskey reads it:
// an unknown or removed passkey is the registry's answer, not a failure
// to answer.
type workerPasskeys struct{ reg *registry.Registry }

func (w workerPasskeys) Credential(ctx context.Context, person string, id []byte) (passkey.Credential, uint32, error) {
	r, err := w.reg.Lookup(ctx, person, id)
	if errors.Is(err, registry.ErrUnknown) || errors.Is(err, registry.ErrRemoved) {
		return passkey.Credential{}, 0, activities.PasskeyRefusal(err)
	}
	return r.Credential, r.SignCount, err
}

func (w workerPasskeys) Used(ctx context.Context, id []byte, before, after uint32) error {
	return w.reg.Used(ctx, id, before, after)
}
