package client

import (
	"fmt"

	"go.temporal.io/sdk/client"
)

// GRPCCompression returns the SDK's connection option for compressing
// what is sent to Temporal: "gzip" (the SDK's default) or "none".
//
// Why none: toolgate's messages are a few KiB of JSON, and gzip costs
// each of them CPU on both ends of the connection. Where bandwidth is not
// the limit (workers next to their cluster, one host) that CPU is better
// spent on calls; docs/production.md ("Compression") gives the figures.
func GRPCCompression(name string) (client.GrpcCompression, error) {
	switch name {
	case "", "gzip":
		return &client.GrpcCompressionGzip{}, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	}
	return nil, fmt.Errorf("unknown gRPC compression %q: use gzip or none", name)
}
