package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/statement"
)

// Door keys (package statement): a front door (serve, dev, a CLI or hook
// or MCP gateway that dials Temporal itself) signs what it sends with its
// door key; a worker trusts the doors' public keys in a doors file and
// holds no door key.

// devDoorKeyFile and devDoorsFile are toolgate dev's, in its data dir; the
// other verbs look for them in the default data dir.
const (
	devDoorKeyFile = "door-key.json"
	devDoorsFile   = "doors.json"
)

// doorKey is the door key a front door signs with.
type doorKey struct {
	file   string
	signer *statement.Signer
	loaded bool
}

func (k *doorKey) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.file, "door-key", os.Getenv("TOOLGATE_DOOR_KEY"), "the door key this process signs submissions and decisions with when it talks to Temporal itself (env TOOLGATE_DOOR_KEY; default .toolgate/door-key.json when it exists; an operator's file: everyone else uses --api)")
}

// load reads the door key once: the file named, or dev's when it exists.
// Without one the signer is nil, and what needs a statement is refused
// with noDoorKeyMessage.
func (k *doorKey) load() (*statement.Signer, error) {
	if k.loaded {
		return k.signer, nil
	}
	file, ok := orDevFile(k.file, devDoorKeyFile)
	if !ok {
		k.loaded = true
		return nil, nil
	}
	s, err := statement.LoadSigner(file)
	if err != nil {
		return nil, usageError("--door-key: %v", err)
	}
	k.signer, k.loaded = s, true
	return s, nil
}

// noDoorKeyMessage says how to send what only a door may send.
func noDoorKeyMessage() string {
	return "no door key: toolgate's workflows take submissions and decisions only signed by a toolgate door. " +
		"Use the HTTP API (--api URL with --token; env TOOLGATE_API, TOOLGATE_TOKEN), which signs for whom it authenticated; " +
		"or, as an operator, pass --door-key FILE (env TOOLGATE_DOOR_KEY; toolgate dev's is .toolgate/door-key.json in its directory)"
}

// orDevFile is file, or else toolgate dev's devFile when it is in
// .toolgate here; ok is false when neither is.
func orDevFile(file, devFile string) (string, bool) {
	if file != "" {
		return file, true
	}
	file = filepath.Join(".toolgate", devFile)
	_, err := os.Stat(file)
	return file, err == nil
}

// trustedDoors are the doors a worker trusts.
type trustedDoors struct {
	file string
}

// add adds --doors. A worker takes it from the flag or TOOLGATE_DOORS
// alone: a default in its working directory (where tools may write) could
// be planted. toolgate dev keeps its own in its data dir and reads no
// TOOLGATE_DOORS, so it never adds its key to a deployment's file.
func (d *trustedDoors) add(cmd *cobra.Command, dev bool) {
	if dev {
		cmd.Flags().StringVar(&d.file, "doors", "", "the doors file: public keys of the front doors whose statements the workflows trust (default <data-dir>/doors.json, made on first start with dev's own door; 'toolgate doors new' adds one)")
		return
	}
	cmd.Flags().StringVar(&d.file, "doors", os.Getenv("TOOLGATE_DOORS"), "the doors file: public keys of the front doors whose statements the workflows trust (env TOOLGATE_DOORS; required; 'toolgate doors new' writes one)")
}

// load reads the doors file the flag names.
func (d *trustedDoors) load() (*statement.Doors, error) {
	file := d.file
	if file == "" {
		return nil, usageError("a worker needs the doors it trusts: pass --doors FILE or set TOOLGATE_DOORS (a file 'toolgate doors new' writes; toolgate dev's is doors.json in its data dir)")
	}
	doors, err := statement.LoadDoors(file)
	if err != nil {
		return nil, usageError("--doors: %v", err)
	}
	return doors, nil
}

// devDoors makes toolgate dev's door key and doors file in its data dir on
// first start, and returns the doors its worker trusts: the file's, which
// hold dev's own door.
func devDoors(dataDir string, key *doorKey, trusted *trustedDoors) (*statement.Doors, string, error) {
	made := false
	if key.file == "" {
		key.file = filepath.Join(dataDir, devDoorKeyFile)
		s, created, err := statement.LoadOrCreateSigner(key.file, "dev")
		if err != nil {
			return nil, "", usageError("door key: %v", err)
		}
		key.signer, key.loaded, made = s, true, created
	} else if _, err := key.load(); err != nil {
		return nil, "", err
	}
	if trusted.file == "" {
		trusted.file = filepath.Join(dataDir, devDoorsFile)
	}
	doors, err := statement.LoadDoors(trusted.file)
	switch {
	case errors.Is(err, fs.ErrNotExist) || made && err != nil:
		doors = statement.NewDoors()
	case err != nil:
		return nil, "", usageError("--doors: %v", err)
	}
	if !trusts(doors, key.signer) {
		doors = doors.Trust(key.signer.Public())
		if err := statement.WriteDoors(trusted.file, doors); err != nil {
			return nil, "", fmt.Errorf("write the doors file: %w", err)
		}
	}
	note := fmt.Sprintf("  doors      this process signs as door %s (key %s, %s); workers trust %s\n", key.signer.Door(), key.signer.KeyID(), key.file, trusted.file)
	return doors, note, nil
}

func trusts(doors *statement.Doors, s *statement.Signer) bool {
	for _, k := range doors.Keys() {
		if k.KeyID == s.KeyID() && !k.Revoked {
			return true
		}
	}
	return false
}

// doorsCommand makes door keys and keeps the doors file.
func (a *app) doorsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doors",
		Short: "Make door keys, and list, trust or revoke them in a doors file",
		Long: `A toolgate door (serve, dev, or a CLI, hook or MCP gateway that dials
Temporal itself) signs every submission, decision, cancel, claim, revoke
and session end with its door key, for whom it authenticated; workers
take a message only with a valid statement from a door in their doors
file (--doors). A door key is a secret of its door; the doors file holds
public keys and goes to every worker and auditor. See docs/production.md,
"Door keys".`,
	}
	var doorsFile string
	newCmd := &cobra.Command{
		Use:   "new NAME --key FILE --doors DOORS_FILE",
		Short: "Make a door key for door NAME in FILE and trust it in DOORS_FILE (made if need be)",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			keyFile, _ := cmd.Flags().GetString("key")
			if keyFile == "" || doorsFile == "" {
				return usageError("doors new needs --key FILE (the new door key) and --doors FILE (the doors file workers trust)")
			}
			doors, err := statement.LoadDoors(doorsFile)
			if errors.Is(err, fs.ErrNotExist) {
				doors, err = statement.NewDoors(), nil
			}
			if err != nil {
				return usageError("%v", err)
			}
			s, err := statement.NewKeyFile(keyFile, args[0])
			if err != nil {
				return usageError("%v", err)
			}
			if err := statement.WriteDoors(doorsFile, doors.Trust(s.Public())); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "door %s: key %s in %s, trusted in %s (copy that file to every worker; restart them to trust it)\n", s.Door(), s.KeyID(), keyFile, doorsFile)
			return nil
		},
	}
	newCmd.Flags().String("key", "", "where to write the new door key (0600; refused if it exists)")
	newCmd.Flags().StringVar(&doorsFile, "doors", os.Getenv("TOOLGATE_DOORS"), "the doors file (env TOOLGATE_DOORS)")
	listCmd := &cobra.Command{
		Use:   "list DOORS_FILE",
		Short: "List the door keys a doors file trusts or revokes",
		Args:  exactArgs("DOORS_FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			doors, err := statement.LoadDoors(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DOOR\tKEY ID\tREVOKED")
			for _, k := range doors.Keys() {
				revoked := ""
				if k.Revoked {
					revoked = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Door, k.KeyID, revoked)
			}
			return tw.Flush()
		},
	}
	revokeCmd := &cobra.Command{
		Use:   "revoke KEY_ID DOORS_FILE",
		Short: "Revoke a door key: workers that read DOORS_FILE refuse its statements, old ones too",
		Args:  exactArgs("KEY_ID", "DOORS_FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			doors, err := statement.LoadDoors(args[1])
			if err != nil {
				return usageError("%v", err)
			}
			for _, k := range doors.Keys() {
				if k.KeyID == args[0] {
					k.Revoked = true
					if err := statement.WriteDoors(args[1], doors.Trust(k)); err != nil {
						return err
					}
					fmt.Fprintf(a.stdout, "door %s's key %s is revoked in %s (restart the workers to refuse it)\n", k.Door, k.KeyID, args[1])
					return nil
				}
			}
			return usageError("%s trusts no key %s: 'toolgate doors list %s' lists its keys", args[1], args[0], args[1])
		},
	}
	cmd.AddCommand(newCmd, listCmd, revokeCmd)
	return cmd
}

// isNoDoorKey reports whether err is a client's refusal to send unsigned.
func isNoDoorKey(err error) bool { return errors.Is(err, tgclient.ErrNoDoorKey) }
