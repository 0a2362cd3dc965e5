package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/passkey"
)

// Passkeys is the registry of people's passkeys as the worker reads it
// (package passkey/registry): never from the message that carries an
// assertion.
type Passkeys interface {
	// Credential is the person's registered, not removed, passkey id with
	// the sign counter its last assertion had.
	Credential(ctx context.Context, person string, id []byte) (passkey.Credential, uint32, error)
	// Used moves the passkey's counter from before to after, only if it
	// still is before (a replay or clone racing it loses).
	Used(ctx context.Context, id []byte, before, after uint32) error
}

// ErrTypePasskeyRefused is the type of the error that refuses a decision
// whose passkey assertion does not hold; its message says why.
const ErrTypePasskeyRefused = "PasskeyRefused"

// VerifyPasskeyInput is the argument of VerifyPasskey: the decision the
// assertion must be over (built by the workflow from the call, never from
// the message) and the assertion.
type VerifyPasskeyInput struct {
	Decision  passkey.Decision   `json:"decision"`
	Assertion *passkey.Assertion `json:"assertion"`
	// At is when the workflow took the decision: the assertion must hold
	// then.
	At time.Time `json:"at"`
}

// VerifyPasskey checks a person's passkey assertion over a decision of a
// call against the passkey they registered, and moves its sign counter on.
// A refusal is a non-retryable error of type ErrTypePasskeyRefused that
// names what is wrong; a clone (the counter went back) is also logged as
// an error, for the operator.
func (a *Activities) VerifyPasskey(ctx context.Context, in VerifyPasskeyInput) error {
	if a.Passkeys == nil || a.RelyingParty.ID == "" {
		return refusePasskey("this worker has no passkey registry: start it with a ledger and --public-url")
	}
	if in.Assertion == nil {
		return refusePasskey(passkey.ErrNoAssertion.Error())
	}
	cred, last, err := a.Passkeys.Credential(ctx, in.Decision.By, in.Assertion.CredentialID)
	if err != nil {
		if ctx.Err() == nil && isRegistryRefusal(err) {
			return refusePasskey(err.Error())
		}
		return fmt.Errorf("read the passkey registry: %w", err)
	}
	count, err := passkey.Verify(cred, in.Assertion, in.Decision, a.RelyingParty, last, in.At)
	if errors.Is(err, passkey.ErrClone) {
		activity.GetLogger(ctx).Error("A passkey's sign counter went back: its authenticator may have been cloned; the decision is refused",
			"person", in.Decision.By, "credential", passkey.IDString(cred.ID), "callID", in.Decision.Call)
	}
	if err != nil {
		return refusePasskey(err.Error())
	}
	if err := a.Passkeys.Used(ctx, cred.ID, last, count); err != nil {
		return refusePasskey(err.Error())
	}
	return nil
}

// PasskeyRefusal marks a registry's error as its answer (the passkey is
// unknown, another person's, removed), as against one that failed to
// answer (the database is down), which is retried.
func PasskeyRefusal(err error) error { return registryRefusal{err} }

type registryRefusal struct{ error }

func (r registryRefusal) Unwrap() error { return r.error }

func isRegistryRefusal(err error) bool {
	var r registryRefusal
	return errors.As(err, &r)
}

func refusePasskey(why string) error {
	return temporal.NewNonRetryableApplicationError("passkey refused: "+why, ErrTypePasskeyRefused, nil)
}
