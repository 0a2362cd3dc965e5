package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) healthCommand() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health [--url URL]",
		Short: "Exit 0 when a toolgate listener answers its health check",
		Long: `GET the URL (default the local readiness check, which also checks that
Temporal is reachable) and exit 0 on a 2xx answer, 1 otherwise: a
container healthcheck that needs no curl in the image.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageError("--url: %v", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("health check %s: %w", url, err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("health check %s: %s", url, resp.Status)
			}
			fmt.Fprintf(a.stdout, "%s: %s\n", url, resp.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7700/readyz", "URL to check")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}
