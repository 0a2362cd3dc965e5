package client

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// testDoor is the door the tests' clients sign as.
var testDoor = func() *statement.Signer {
	sum := sha256.Sum256([]byte("client test door"))
	return statement.NewSigner("test", ed25519.NewKeyFromSeed(sum[:]))
}()

func TestAClientWithoutADoorKeySendsNothingThatNeedsAStatement(t *testing.T) {
	fake := &fakeTemporal{}
	c := New(fake, "")
	_, err := c.Submit(context.Background(), CallRequest{CallID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{}`), Requester: "agent-1"})
	require.ErrorIs(t, err, ErrNoDoorKey)
	assert.Zero(t, fake.calls, "nothing reached Temporal")
	assert.Empty(t, fake.owners, "no session was opened")
	_, err = c.EndSession(context.Background(), "s1", policy.Approver{Name: "root", Groups: []string{"*"}})
	assert.ErrorIs(t, err, ErrNoDoorKey)
	assert.ErrorIs(t, c.Revoke(context.Background(), "s1", "shell", policy.Approver{Name: "root", Groups: []string{"*"}}), ErrNoDoorKey)
}

func TestASubmissionCarriesItsRequestersStatement(t *testing.T) {
	fake := &fakeTemporal{}
	_, err := New(fake, "").WithDoor(testDoor).Submit(context.Background(), CallRequest{CallID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Requester: "agent-1"})
	require.NoError(t, err)
	require.Len(t, fake.inputs, 1)
	in := fake.inputs[0]
	st, err := statement.NewDoors(testDoor.Public()).Check(in.Submission, policy.SubmissionStatement(in.Call), time.Now())
	require.NoError(t, err)
	assert.Equal(t, "agent-1", st.By)
	assert.Equal(t, statement.Digest(json.RawMessage(`{"command":"ls"}`)), st.Args)
}

// A door that submitted a call signs its decision without reading the
// call's history again: a call's request and first run never change.
func TestADoorKnowsTheCallsItSubmitted(t *testing.T) {
	fake := &fakeTemporal{}
	c := New(fake, "").WithDoor(testDoor)
	req := CallRequest{CallID: "c1", Session: "s1", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Requester: "agent-1"}
	_, err := c.Submit(context.Background(), req)
	require.NoError(t, err)

	call, run, err := c.callFacts(context.Background(), "c1")
	require.NoError(t, err)
	assert.Equal(t, "agent-1", call.Requester)
	assert.JSONEq(t, `{"command":"ls"}`, string(call.Args))
	assert.Equal(t, "run-c1", run)
	assert.Zero(t, fake.historyReads, "known from the submission")
}
