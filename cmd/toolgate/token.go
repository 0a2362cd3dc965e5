package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/server"
)

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make API tokens"}
	var (
		name, role, owner string
		groups            []string
	)
	newCmd := &cobra.Command{
		Use:   "new --name NAME --role agent|approver|admin|auditor [--groups g1,g2] [--owner PERSON]",
		Short: "Print a new token and the entry to add to the tokens file",
		Long: `Print a new random token, and the tokens-file entry that holds only its
SHA-256 hash. Give the token to its owner; keep the entry in the file that
'toolgate serve --tokens' (or 'dev --tokens') reads.

Roles: agent (submits calls, reads its own), approver (decides, for its
groups), admin (everything), auditor (reads the decision ledger, every
call, the waiting lists and sessions, in the API and the inbox; decides,
cancels and changes nothing).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			entry := server.TokenEntry{Name: name, Role: server.Role(role), Groups: groups, Owner: owner}
			token := server.NewToken("tg_")
			entry.SHA256 = server.HashToken(token)
			if _, err := server.NewTokens([]server.TokenEntry{entry}); err != nil {
				return usageError("%v", err)
			}
			file, err := server.MarshalTokens(entry)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "token: %s\n\nadd to the tokens file:\n%s", token, file)
			return nil
		},
	}
	newCmd.Flags().StringVar(&name, "name", "", "who holds the token; recorded as the requester or approver")
	newCmd.Flags().StringVar(&role, "role", "", "agent, approver, admin or auditor")
	newCmd.Flags().StringSliceVar(&groups, "groups", nil, "approver groups (\"*\" for all)")
	newCmd.Flags().StringVar(&owner, "owner", "", "for an agent token: the person running the agent, who may decide its calls whose rule says user: true")
	_ = newCmd.MarkFlagRequired("name")
	_ = newCmd.MarkFlagRequired("role")
	cmd.AddCommand(newCmd)
	return cmd
}
