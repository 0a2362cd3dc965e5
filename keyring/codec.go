package keyring

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
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
)

// Codec encrypts payloads with the ring's current key and decrypts them
// with whichever key they name. Payloads of other encodings pass through
// both ways: histories written before encryption still read.
type Codec struct{ k *Keyring }

var _ converter.PayloadCodec = Codec{}

// Codec returns the ring's payload codec.
func (k *Keyring) Codec() Codec { return Codec{k: k} }

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
		id, sealed, err := c.k.Seal(purposePayload, plain)
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
// k. A nil k is the default alone (plaintext).
func DataConverter(k *Keyring) converter.DataConverter {
	if k == nil {
		return converter.GetDefaultDataConverter()
	}
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), k.Codec())
}

// FailureConverter moves a failure's message and stack trace into an
// encrypted payload (they can hold a tool's output). A nil k is the
// default.
func FailureConverter(k *Keyring) converter.FailureConverter {
	if k == nil {
		return temporal.GetDefaultFailureConverter()
	}
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          DataConverter(k),
		EncodeCommonAttributes: true,
	})
}

// Configure sets the client options' converters for k.
func Configure(o *client.Options, k *Keyring) {
	o.DataConverter = DataConverter(k)
	o.FailureConverter = FailureConverter(k)
}
