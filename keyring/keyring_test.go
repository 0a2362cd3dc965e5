package keyring_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/keyring"
)

const secret = "AWS_SECRET=sk-live-4f9d2c"

func newRing(t *testing.T) (*keyring.Keyring, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	k, created, err := keyring.LoadOrCreate(path)
	require.NoError(t, err)
	require.True(t, created)
	return k, path
}

func TestTheFirstStartMakesAPrivateKeyringAndTheNextReadsIt(t *testing.T) {
	k, path := newRing(t)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	again, created, err := keyring.LoadOrCreate(path)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, k.Current(), again.Current())
	require.Len(t, again.List(), 1)
	assert.True(t, again.List()[0].Current)
	assert.Regexp(t, `^k\d{8}-[0-9a-f]{6}$`, k.Current())
}

func TestAKeyringOthersMayReadIsRefused(t *testing.T) {
	_, path := newRing(t)
	require.NoError(t, os.Chmod(path, 0o640))
	_, err := keyring.Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "chmod 600")
}

func TestABrokenKeyringFileIsNamed(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        `{"keys": [`,
		"no keys":         `{"current": "a", "keys": []}`,
		"short key":       `{"current": "a", "keys": [{"id": "a", "key": "AAAA"}]}`,
		"unknown current": `{"current": "b", "keys": [{"id": "a", "key": "` + strings.Repeat("A", 43) + `="}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.json")
			require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
			_, err := keyring.Load(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
		})
	}
}

func TestPayloadsAreEncryptedAndReadBack(t *testing.T) {
	k, _ := newRing(t)
	dc := keyring.DataConverter(k)
	p, err := dc.ToPayload(map[string]string{"content": secret})
	require.NoError(t, err)
	assert.Equal(t, keyring.EncodingEncrypted, string(p.Metadata[converter.MetadataEncoding]))
	assert.Equal(t, k.Current(), string(p.Metadata[keyring.MetadataKeyID]))
	assert.NotContains(t, string(p.Data), "sk-live")
	raw, _ := json.Marshal(p)
	assert.NotContains(t, string(raw), "sk-live")

	var back map[string]string
	require.NoError(t, dc.FromPayload(p, &back))
	assert.Equal(t, secret, back["content"])

	again, err := dc.ToPayload(map[string]string{"content": secret})
	require.NoError(t, err)
	assert.NotEqual(t, p.Data, again.Data, "a fresh nonce per payload")
}

func TestPlaintextPayloadsFromBeforeStillRead(t *testing.T) {
	k, _ := newRing(t)
	plain, err := converter.GetDefaultDataConverter().ToPayload("written before encryption")
	require.NoError(t, err)
	var s string
	require.NoError(t, keyring.DataConverter(k).FromPayload(plain, &s))
	assert.Equal(t, "written before encryption", s)
}

func TestRotationKeepsOldPayloadsReadable(t *testing.T) {
	k, path := newRing(t)
	old, err := keyring.DataConverter(k).ToPayload(secret)
	require.NoError(t, err)

	added, err := keyring.Rotate(path)
	require.NoError(t, err)
	rotated, err := keyring.Load(path)
	require.NoError(t, err)
	assert.Equal(t, added.ID, rotated.Current())
	assert.NotEqual(t, k.Current(), rotated.Current())
	require.Len(t, rotated.List(), 2)

	var s string
	require.NoError(t, keyring.DataConverter(rotated).FromPayload(old, &s))
	assert.Equal(t, secret, s)
	fresh, err := keyring.DataConverter(rotated).ToPayload(secret)
	require.NoError(t, err)
	assert.Equal(t, added.ID, string(fresh.Metadata[keyring.MetadataKeyID]))

	// A process still running with the ring before rotation reads the new
	// key from the file when it first meets it.
	require.NoError(t, keyring.DataConverter(k).FromPayload(fresh, &s))
	assert.Equal(t, secret, s)
}

func TestAPayloadThatCannotBeDecryptedIsAClearError(t *testing.T) {
	k, _ := newRing(t)
	other, otherPath := newRing(t)
	p, err := keyring.DataConverter(k).ToPayload(secret)
	require.NoError(t, err)
	var s string

	err = keyring.DataConverter(other).FromPayload(p, &s)
	require.Error(t, err)
	assert.True(t, errors.Is(err, keyring.ErrUnknownKey), "%v", err)
	assert.Contains(t, err.Error(), k.Current())
	assert.Contains(t, err.Error(), otherPath, "the operator's own message names the file")
	id, ok := keyring.UnknownKeyID(err)
	assert.True(t, ok)
	assert.Equal(t, k.Current(), id, "the ID alone, for a message that must not name the file")

	corrupted := clone(p)
	corrupted.Data[len(corrupted.Data)-1] ^= 0x01
	err = keyring.DataConverter(k).FromPayload(corrupted, &s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not decrypt")
	_, ok = keyring.UnknownKeyID(err)
	assert.False(t, ok, "a payload altered under a held key is not an unknown key")

	truncated := clone(p)
	truncated.Data = truncated.Data[:10]
	err = keyring.DataConverter(k).FromPayload(truncated, &s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "truncated")

	// The same key ID with other bytes: a wrong key, not garbage.
	wrong := filepath.Join(t.TempDir(), "keys.json")
	body := `{"current": "` + k.Current() + `", "keys": [{"id": "` + k.Current() + `", "key": "` + strings.Repeat("A", 43) + `="}]}`
	require.NoError(t, os.WriteFile(wrong, []byte(body), 0o600))
	wk, err := keyring.Load(wrong)
	require.NoError(t, err)
	err = keyring.DataConverter(wk).FromPayload(p, &s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not decrypt")

	unnamed := clone(p)
	delete(unnamed.Metadata, keyring.MetadataKeyID)
	err = keyring.DataConverter(k).FromPayload(unnamed, &s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), keyring.MetadataKeyID)
}

func TestFailuresCarryTheirMessageEncrypted(t *testing.T) {
	k, _ := newRing(t)
	fc := keyring.FailureConverter(k)
	f := fc.ErrorToFailure(temporal.NewApplicationError("tool failed: "+secret, "ToolError"))
	assert.NotContains(t, f.GetMessage(), "sk-live")
	assert.NotContains(t, f.GetStackTrace(), "sk-live")
	require.NotNil(t, f.GetEncodedAttributes())
	assert.Equal(t, keyring.EncodingEncrypted, string(f.GetEncodedAttributes().Metadata[converter.MetadataEncoding]))

	err := fc.FailureToError(f)
	assert.Contains(t, err.Error(), secret)
}

// In workflow code a payload under a key the worker lacks (or any
// encrypted payload, on a worker without a keyring) is a panic, which the
// SDK turns into a retried workflow task; everywhere else it is an error.
func TestWorkflowCodeWaitsForAKeyItLacks(t *testing.T) {
	client, _ := newRing(t)
	worker, _ := newRing(t)
	p, err := keyring.DataConverter(client).ToPayload(map[string]string{"args": secret})
	require.NoError(t, err)

	var v map[string]string
	err = keyring.DataConverter(worker).FromPayload(p, &v)
	require.ErrorIs(t, err, keyring.ErrUnknownKey, "outside workflow code: an error")
	inWorkflow := keyring.DataConverter(worker).(converter.ContextAware).WithWorkflowContext(nil)
	assert.PanicsWithValue(t, keyring.WaitingForKeys+"a payload is encrypted with key "+client.Current()+
		", which this worker's keyring does not hold; the call runs once the workers have it (docs/production.md, \"Payload keys\")",
		func() { _ = inWorkflow.FromPayload(p, &v) })
	ps, err := keyring.DataConverter(client).ToPayloads("a", "b")
	require.NoError(t, err)
	assert.Panics(t, func() { _ = inWorkflow.FromPayloads(ps, new(string), new(string)) })

	keyless := keyring.DataConverter(nil).(converter.ContextAware).WithWorkflowContext(nil)
	assert.PanicsWithValue(t, keyring.WaitingForKeys+"a payload is encrypted with key "+client.Current()+
		", and this worker has no keyring; the call runs once the workers have it (docs/production.md, \"Payload keys\")",
		func() { _ = keyless.FromPayload(p, &v) })

	// What the worker can read, it reads, in workflow code too.
	own, err := keyring.DataConverter(worker).ToPayload("fine")
	require.NoError(t, err)
	var got string
	require.NoError(t, keyring.DataConverter(worker).(converter.ContextAware).WithWorkflowContext(nil).FromPayload(own, &got))
	assert.Equal(t, "fine", got)
}

// The wait for keys is written unencrypted, so a client holding only the
// new key reads why its call waits; every other failure stays encrypted.
func TestTheWaitForKeysIsTheOneFailureInTheClear(t *testing.T) {
	k, _ := newRing(t)
	fc := keyring.FailureConverter(k)
	f := fc.ErrorToFailure(errors.New(keyring.WaitingForKeys + "a payload is encrypted with key k1"))
	assert.Equal(t, keyring.WaitingForKeys+"a payload is encrypted with key k1", f.GetMessage())
	assert.Nil(t, f.GetEncodedAttributes())
	f = fc.ErrorToFailure(errors.New("tool failed: " + keyring.WaitingForKeys))
	assert.NotContains(t, f.GetMessage(), "tool failed")
}

func TestSealedValuesAreBoundToTheirPurpose(t *testing.T) {
	k, _ := newRing(t)
	id, sealed, err := k.Seal("ledger", []byte(secret))
	require.NoError(t, err)
	plain, err := k.Open("ledger", id, sealed)
	require.NoError(t, err)
	assert.Equal(t, secret, string(plain))
	_, err = k.Open("payload", id, sealed)
	assert.Error(t, err)
}

func clone(p *commonpb.Payload) *commonpb.Payload {
	c := &commonpb.Payload{Metadata: map[string][]byte{}, Data: append([]byte(nil), p.Data...)}
	for k, v := range p.Metadata {
		c.Metadata[k] = v
	}
	return c
}

// BenchmarkCodec is what encryption adds to one payload of a call's size
// (about 1 KiB, e.g. a file write's arguments), both ways, against the
// default converter alone in the same run.
func BenchmarkCodec(b *testing.B) {
	ring, _, err := keyring.LoadOrCreate(filepath.Join(b.TempDir(), "keys.json"))
	require.NoError(b, err)
	value := map[string]string{"path": "notes.txt", "content": strings.Repeat("x", 1000)}
	for name, dc := range map[string]converter.DataConverter{"plain": converter.GetDefaultDataConverter(), "encrypted": keyring.DataConverter(ring)} {
		b.Run(name, func(b *testing.B) {
			var back map[string]string
			for b.Loop() {
				p, err := dc.ToPayload(value)
				if err != nil {
					b.Fatal(err)
				}
				if err := dc.FromPayload(p, &back); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// What the codec endpoint encrypts for a person's tool (the stock CLI's
// --codec-endpoint) is bound to the endpoint: the endpoint reads it back,
// and what toolgate wrote, but a worker refuses it as a payload.
func TestTheCodecEndpointsCiphertextIsNoWorkerPayload(t *testing.T) {
	k, _ := newRing(t)
	plain, err := converter.GetDefaultDataConverter().ToPayloads(map[string]string{"decision": "approved"})
	require.NoError(t, err)

	minted, err := k.EndpointCodec().Encode(plain.Payloads)
	require.NoError(t, err)
	assert.Equal(t, keyring.EncodingEncrypted, string(minted[0].Metadata[converter.MetadataEncoding]))
	back, err := k.EndpointCodec().Decode(minted)
	require.NoError(t, err)
	assert.Equal(t, plain.Payloads[0].Data, back[0].Data)

	_, err = k.Codec().Decode(minted)
	require.Error(t, err, "the workers' codec refuses the endpoint's ciphertext")
	var v map[string]string
	assert.Error(t, keyring.DataConverter(k).FromPayload(minted[0], &v))

	written, err := k.Codec().Encode(plain.Payloads)
	require.NoError(t, err)
	back, err = k.EndpointCodec().Decode(written)
	require.NoError(t, err, "the endpoint decodes what toolgate wrote")
	assert.Equal(t, plain.Payloads[0].Data, back[0].Data)
}
