package client

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

func TestGRPCCompressionNamesTheSDKsOptions(t *testing.T) {
	for name, want := range map[string]client.GrpcCompression{
		"":     &client.GrpcCompressionGzip{}, // the SDK's default
		"gzip": &client.GrpcCompressionGzip{},
		"none": &client.GrpcCompressionNone{},
	} {
		got, err := GRPCCompression(name)
		require.NoError(t, err, name)
		assert.IsType(t, want, got, name)
	}
	_, err := GRPCCompression("zstd")
	require.Error(t, err)
	assert.Equal(t, `unknown gRPC compression "zstd": use gzip or none`, err.Error())
}
