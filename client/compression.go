package client

import (
	"fmt"

	"go.temporal.io/sdk/client"
)

// GRPCCompression returns the SDK's connection option for compressing
// what is sent to Temporal: "gzip" (the SDK's default) or "none".
//
// Why none: toolgate's messages are a few KiB of JSON, and gzip costs
// each of them CPU on both ends of the connection. On a network where
// bandwidth is not the limit (workers next to their cluster, one host)
// that CPU is what limits a busy session; docs/production.md and
// docs/benchmarks.md give the figures.
func GRPCCompression(name string) (client.GrpcCompression, error) {
	switch name {
	case "", "gzip":
		return &client.GrpcCompressionGzip{}, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	}
	return nil, fmt.Errorf("unknown gRPC compression %q: use gzip or none", name)
}
