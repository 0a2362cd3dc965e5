// Command toolgate-ui serves the Temporal Web UI for toolgate: the stock
// UI (github.com/temporalio/ui-server, the one the temporal CLI embeds),
// read-only, with toolgate's codec endpoint so that a person signed in to
// toolgate's inbox reads decrypted histories and anyone else sees
// ciphertext. `toolgate dev` starts it when it is installed beside
// toolgate (go install ./cmd/...): it is a program of its own because the
// UI's assets are over 100 MB, which toolgate's own binary does not carry.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "toolgate-ui:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("toolgate-ui", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8233", "address the UI listens on (host:port)")
	temporal := fs.String("temporal-address", "127.0.0.1:7233", "the Temporal frontend's host:port")
	codec := fs.String("codec-endpoint", "", "toolgate's codec endpoint (http://HOST:PORT/codec): the UI decodes payloads there with the browser's toolgate sign-in")
	namespace := fs.String("namespace", "default", "the namespace the UI opens")
	signIn := fs.String("sign-in-url", "", "where people sign in to read decoded payloads (toolgate's inbox /login); the UI links it when it cannot decode")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", *listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 {
		return fmt.Errorf("--listen %q: the UI needs a port of its own", *listen)
	}
	if *codec == "" {
		return errors.New("--codec-endpoint is required: without it the UI shows every payload as ciphertext")
	}
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: *temporal,
		Host:                host,
		Port:                port,
		EnableUI:            true,
		DefaultNamespace:    *namespace,
		// The credentials are the browser's toolgate session cookie: the
		// codec endpoint decodes for approvers, admins and auditors only.
		Codec: uiconfig.Codec{Endpoint: *codec, IncludeCredentials: true,
			DefaultErrorMessage: "toolgate decodes payloads for people signed in to its inbox (approvers, admins, auditors)",
			DefaultErrorLink:    *signIn},
		// Read-only: a call is decided, cancelled or ended through
		// toolgate's doors, which check who asks; the UI's terminate,
		// signal, reset and start would go around them.
		DisableWriteActions: true,
		CORS:                uiconfig.CORS{CookieInsecure: true}, // http on localhost
		HideLogs:            true,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	srv := uiserver.NewServer(uioptions.WithConfigProvider(cfg))
	done := make(chan error, 1)
	go func() { done <- srv.Start() }()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-stop:
		srv.Stop()
		return nil
	}
}
