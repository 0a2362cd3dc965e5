package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/logging"
	"github.com/toolgate/toolgate/workflows"
)

// connection is how to reach Temporal.
type connection struct {
	address, namespace, taskQueue string
	tlsCert, tlsKey, tlsCA        string
	apiKey                        string
	// compression is the gRPC compression of what is sent to Temporal.
	compression string
	// keys encrypt the payloads.
	keys payloadKeys
	// door signs what this process sends for whom it authenticated.
	door doorKey
	// otel is the process's OpenTelemetry (dev, serve, worker, mcp).
	otel otelSetup
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// addFlags adds the connection flags to a command.
func (c *connection) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.address, "temporal-address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	f.StringVar(&c.namespace, "namespace", envOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	f.StringVar(&c.taskQueue, "task-queue", workflows.TaskQueue, "task queue of toolgate's workers")
	f.StringVar(&c.tlsCert, "tls-cert", os.Getenv("TEMPORAL_TLS_CERT"), "client certificate file for mTLS (env TEMPORAL_TLS_CERT)")
	f.StringVar(&c.tlsKey, "tls-key", os.Getenv("TEMPORAL_TLS_KEY"), "client key file for mTLS (env TEMPORAL_TLS_KEY)")
	f.StringVar(&c.tlsCA, "tls-ca", os.Getenv("TEMPORAL_TLS_CA"), "CA certificate file to verify the server (env TEMPORAL_TLS_CA)")
	f.StringVar(&c.apiKey, "api-key", os.Getenv("TEMPORAL_API_KEY"), "API key, e.g. for Temporal Cloud; implies TLS (env TEMPORAL_API_KEY)")
	f.StringVar(&c.compression, "grpc-compression", envOr("TEMPORAL_GRPC_COMPRESSION", "gzip"), "compress what is sent to Temporal: gzip, or none where bandwidth is not the limit (workers next to their cluster); env TEMPORAL_GRPC_COMPRESSION")
	c.keys.add(cmd, false)
	c.door.add(cmd)
}

// dial connects to Temporal with the SDK's logs going through zap, its
// metrics to metrics (nil: none) and its payloads encrypted with the
// keyring (refused without one, unless plaintext was asked for).
func (c *connection) dial(logger *zap.Logger, metrics client.MetricsHandler) (client.Client, error) {
	ring, err := c.keys.load(logger)
	if err != nil {
		return nil, err
	}
	if _, err := c.door.load(); err != nil {
		return nil, err
	}
	opts := client.Options{
		HostPort:       c.address,
		Namespace:      c.namespace,
		Logger:         logging.NewTemporal(logger.Named("temporal")),
		MetricsHandler: metrics,
	}
	keyring.Configure(&opts, ring)
	tracing, err := c.otel.interceptor()
	if err != nil {
		return nil, err
	}
	if tracing != nil {
		opts.Interceptors = append(opts.Interceptors, tracing)
	}
	if opts.ConnectionOptions.GrpcCompression, err = tgclient.GRPCCompression(c.compression); err != nil {
		return nil, usageError("--grpc-compression: %v", err)
	}
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, usageError("%v", err)
	}
	opts.ConnectionOptions.TLS = tlsConfig
	if c.apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.apiKey)
		if opts.ConnectionOptions.TLS == nil {
			opts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	tc, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w", c.address, c.namespace, err)
	}
	return tc, nil
}

func (c *connection) tlsConfig() (*tls.Config, error) {
	if c.tlsCert == "" && c.tlsKey == "" && c.tlsCA == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS key pair: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate found in %s", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
