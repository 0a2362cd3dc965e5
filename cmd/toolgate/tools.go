package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/tool"
)

// toolLister lists the tools: package client over Temporal, package
// apiclient over the HTTP API (--api, agent or admin token).
type toolLister interface {
	Tools(ctx context.Context) ([]tool.Descriptor, error)
}

var (
	_ toolLister = (*tgclient.Client)(nil)
	_ toolLister = (*apiclient.Client)(nil)
)

func (a *app) toolsCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "tools [--format json|openai|anthropic]",
		Short: "List the tools an agent may ask for",
		Long: `List the tools toolgate's workers run that the policy does not deny
outright, sorted by name: a table of names and descriptions, or with
--format the JSON body of GET /v1/tools, {"tools":[...]}: json (toolgate's
descriptors: name, description, input_schema, annotations), openai (the
tools of OpenAI's Chat Completions API) or anthropic (the tools of
Anthropic's Messages API). Over Temporal by default; with --api URL and an
agent or admin --token over the HTTP API.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "" {
				if _, err := tgclient.ToolsAs(format, nil); err != nil {
					return usageError("--%v", err)
				}
			}
			c, closeFn, err := a.toolLister()
			if err != nil {
				return err
			}
			defer closeFn()
			ds, err := c.Tools(cmd.Context())
			if err != nil {
				return err
			}
			if format != "" {
				tools, err := tgclient.ToolsAs(format, ds)
				if err != nil {
					return err
				}
				writeJSON(a.stdout, map[string]any{"tools": tools})
				return nil
			}
			return a.printTools(ds)
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "print JSON in this shape: json, openai or anthropic (default: a table)")
	a.conn.addFlags(cmd)
	a.api.add(cmd)
	return cmd
}

// toolLister opens the HTTP API with --api, else Temporal.
func (a *app) toolLister() (toolLister, func(), error) {
	if a.api.url == "" {
		return a.client()
	}
	if a.api.token == "" {
		return nil, nil, usageError("--api needs --token (or TOOLGATE_TOKEN)")
	}
	return apiclient.New(a.api.url, a.api.token), func() {}, nil
}

// printTools prints a table of names and the first line of each
// description.
func (a *app) printTools(ds []tool.Descriptor) error {
	if len(ds) == 0 {
		fmt.Fprintln(a.stdout, "no tools: the workers run none, or the policy denies them all")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, d := range ds {
		first, _, _ := strings.Cut(strings.TrimSpace(d.Description), "\n")
		fmt.Fprintf(tw, "%s\t%s\n", d.Name, abridge(first, 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%d %s\n", len(ds), plural(int64(len(ds)), "tool", "tools"))
	return nil
}
