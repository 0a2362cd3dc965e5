package keyring

import (
	"context"
	"errors"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// The encrypted payload's format: the whole original payload (metadata and
// data), encrypted, as the data; the key's ID beside it. The names are
// those of Temporal's encryption sample, so its tools recognise them.
const (
	EncodingEncrypted = "binary/encrypted"
	MetadataKeyID     = "encryption-key-id"
	purposePayload    = "payload"
	// purposeEndpoint binds what the codec endpoint encrypts for a person
	// (the stock CLI's --codec-endpoint) to that use: a worker opens only
	// purposePayload, so such ciphertext is no workflow input, signal or
	// update.
	purposeEndpoint = "codec-endpoint"
)

// Codec encrypts payloads with the ring's current key and decrypts them
// with whichever key they name. Payloads of other encodings pass through
// both ways: histories written before encryption still read.
type Codec struct {
	k *Keyring
	// endpoint: the codec endpoint's, which encrypts for people's tools
	// and decrypts both kinds.
	endpoint bool
}

var _ converter.PayloadCodec = Codec{}

// Codec returns the ring's payload codec.
func (k *Keyring) Codec() Codec { return Codec{k: k} }

// EndpointCodec returns the codec the codec endpoint serves: it decrypts
// what toolgate wrote, and what it encrypts is bound to the endpoint
// (AES-GCM additional data), so toolgate's workers refuse it as a
// payload.
func (k *Keyring) EndpointCodec() Codec { return Codec{k: k, endpoint: true} }

// Encode encrypts each payload not encrypted yet.
func (c Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if Encrypted(p) {
			out[i] = p
			continue
		}
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("encrypt payload: %w", err)
		}
		purpose := purposePayload
		if c.endpoint {
			purpose = purposeEndpoint
		}
		id, sealed, err := c.k.Seal(purpose, plain)
		if err != nil {
			return payloads, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(EncodingEncrypted), MetadataKeyID: []byte(id)},
			Data:     sealed,
		}
	}
	return out, nil
}

// Decode decrypts each encrypted payload. One it cannot decrypt is an
// error naming its key, never a garbled value.
func (c Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if !Encrypted(p) {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		if id == "" {
			return payloads, fmt.Errorf("encrypted payload without %s metadata", MetadataKeyID)
		}
		plain, err := c.k.Open(purposePayload, id, p.GetData())
		if err != nil && c.endpoint && !errors.Is(err, ErrUnknownKey) {
			plain, err = c.k.Open(purposeEndpoint, id, p.GetData())
		}
		if err != nil {
			return payloads, fmt.Errorf("payload %w", err)
		}
		var orig commonpb.Payload
		if err := proto.Unmarshal(plain, &orig); err != nil {
			return payloads, fmt.Errorf("payload encrypted with key %s: not a payload inside: %w", id, err)
		}
		out[i] = &orig
	}
	return out, nil
}

// Encrypted says whether p is a payload Codec encrypted.
func Encrypted(p *commonpb.Payload) bool {
	return string(p.GetMetadata()[converter.MetadataEncoding]) == EncodingEncrypted
}

// DataConverter is what every Temporal client and worker of toolgate
// encodes with: the SDK's default converter, its payloads encrypted with
// k. A nil k is the default alone (plaintext). In workflow code it waits
// for keys (see WaitingForKeys).
func DataConverter(k *Keyring) converter.DataConverter {
	if k == nil {
		return dataConverter{DataConverter: converter.GetDefaultDataConverter(), keyless: true}
	}
	return dataConverter{DataConverter: converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), k.Codec())}
}

// WaitingForKeys begins the message of a workflow task that could not
// decrypt a payload: its key is in no keyring this worker holds (a client
// made a new keyring, or got a rotated one before the workers did, or
// encrypts while the workers do not yet). Such a task fails and Temporal
// retries it, with a growing pause, until the workers hold the key (their
// keyring file is read again when they meet a key they lack, or they are
// restarted with it). The workflow itself never fails: a failed workflow
// would end the call for good, with the agent's arguments unread.
const WaitingForKeys = "waiting for keys: "

// dataConverter is the converter; in workflow code it turns a payload
// under a key the worker lacks into a panic, which the SDK turns into a
// failed, retried workflow task (its default WorkflowPanicPolicy) rather
// than an error the workflow would fail on.
type dataConverter struct {
	converter.DataConverter
	// keyless: this worker has no keyring (plaintext payloads).
	keyless bool
}

var _ converter.ContextAware = dataConverter{}

// WithWorkflowContext returns the converter that waits for keys.
func (d dataConverter) WithWorkflowContext(converter.WorkflowContext) converter.DataConverter {
	return waitingConverter(d)
}

// WithContext returns d: outside workflow code (clients, activities) a
// payload under an unknown key is an ordinary error.
func (d dataConverter) WithContext(context.Context) converter.DataConverter { return d }

type waitingConverter dataConverter

func (w waitingConverter) FromPayload(p *commonpb.Payload, valuePtr any) error {
	w.refuseKeyless(p)
	return waitForKeys(w.DataConverter.FromPayload(p, valuePtr))
}

func (w waitingConverter) FromPayloads(ps *commonpb.Payloads, valuePtrs ...any) error {
	for _, p := range ps.GetPayloads() {
		w.refuseKeyless(p)
	}
	return waitForKeys(w.DataConverter.FromPayloads(ps, valuePtrs...))
}

// refuseKeyless waits for keys when a worker without a keyring meets an
// encrypted payload.
func (w waitingConverter) refuseKeyless(p *commonpb.Payload) {
	if w.keyless && Encrypted(p) {
		panic(WaitingForKeys + "a payload is encrypted with key " + string(p.GetMetadata()[MetadataKeyID]) + ", and this worker has no keyring; the call runs once the workers have it (docs/production.md, \"Payload keys\")")
	}
}

// waitForKeys panics on a missing key; the message names the key (an ID,
// no secret) and no path.
func waitForKeys(err error) error {
	if id, ok := UnknownKeyID(err); ok {
		panic(WaitingForKeys + "a payload is encrypted with key " + id + ", which this worker's keyring does not hold; the call runs once the workers have it (docs/production.md, \"Payload keys\")")
	}
	return err
}

// FailureConverter moves a failure's message and stack trace into an
// encrypted payload (they can hold a tool's output). A nil k is the
// default.
func FailureConverter(k *Keyring) converter.FailureConverter {
	if k == nil {
		return temporal.GetDefaultFailureConverter()
	}
	return failureConverter{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          DataConverter(k),
		EncodeCommonAttributes: true,
	})}
}

// failureConverter encrypts every failure but a workflow task's wait for
// keys: whoever reads that one (a client holding only the new key) could
// not decrypt it, and it holds a key ID and nothing else.
type failureConverter struct{ converter.FailureConverter }

func (f failureConverter) ErrorToFailure(err error) *failurepb.Failure {
	// The SDK's panic error keeps the panic's value only as its message.
	if err != nil && strings.HasPrefix(err.Error(), WaitingForKeys) {
		return temporal.GetDefaultFailureConverter().ErrorToFailure(err)
	}
	return f.FailureConverter.ErrorToFailure(err)
}

// Configure sets the client options' converters for k.
func Configure(o *client.Options, k *Keyring) {
	o.DataConverter = DataConverter(k)
	o.FailureConverter = FailureConverter(k)
}
