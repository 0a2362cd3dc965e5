package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/keyring"
	"github.com/toolgate/toolgate/server"
)

// payloadKeys say how toolgate encrypts what it puts in Temporal: the
// keyring file, or plaintext said out loud.
type payloadKeys struct {
	file      string
	plaintext bool
	// ring is the keyring once loaded (nil with plaintext).
	ring   *keyring.Keyring
	loaded bool
}

// devKeysFile is where toolgate dev keeps its keyring, in its data dir;
// the other verbs look for it in the default data dir.
const devKeysFile = "keys.json"

func (k *payloadKeys) add(cmd *cobra.Command, dev bool) {
	def := "default .toolgate/keys.json when it exists"
	if dev {
		def = "default <data-dir>/keys.json, made on first start"
	}
	f := cmd.Flags()
	f.StringVar(&k.file, "keys", os.Getenv("TOOLGATE_KEYS"), "the workers' keyring file: encrypts every argument, output and decision toolgate puts in Temporal (env TOOLGATE_KEYS; "+def+"; 'toolgate keys new FILE' makes one for a new deployment)")
	f.BoolVar(&k.plaintext, "insecure-plaintext-payloads", os.Getenv("TOOLGATE_INSECURE_PLAINTEXT_PAYLOADS") == "1", "send arguments and outputs to Temporal unencrypted, readable by anyone who reads its database (env TOOLGATE_INSECURE_PLAINTEXT_PAYLOADS=1)")
}

// load returns the keyring (nil with --insecure-plaintext-payloads), read
// once. Without either, it refuses: nothing goes to Temporal in plaintext
// unless someone said so.
func (k *payloadKeys) load(logger *zap.Logger) (*keyring.Keyring, error) {
	if k.loaded {
		return k.ring, nil
	}
	if k.plaintext && k.file != "" {
		return nil, usageError("--keys and --insecure-plaintext-payloads exclude each other")
	}
	if k.plaintext {
		logger.Warn("Payloads go to Temporal unencrypted (--insecure-plaintext-payloads): whoever reads its database reads every argument and output")
		k.loaded = true
		return nil, nil
	}
	file := k.file
	if file == "" {
		file = filepath.Join(".toolgate", devKeysFile)
		if _, err := os.Stat(file); err != nil {
			return nil, usageError("%s", noKeysMessage(file))
		}
	}
	ring, err := keyring.Load(file)
	if err != nil {
		return nil, usageError("%v", err)
	}
	k.ring, k.loaded = ring, true
	return ring, nil
}

// noKeysMessage says that no keyring was found where the verbs look for
// one alone (looked, relative to the working directory), and how to name
// the one the workers use. A new keyring would not do: workers cannot
// read what it encrypts.
func noKeysMessage(looked string) string {
	if abs, err := filepath.Abs(looked); err == nil {
		looked = abs
	}
	return "no payload keys: toolgate encrypts what it puts in Temporal with the workers' keyring, and there is none at " + looked +
		" (toolgate dev's, found alone only in the directory toolgate dev runs in): pass --keys FILE or set TOOLGATE_KEYS to the keyring the workers use" +
		" (toolgate dev's is .toolgate/keys.json in its directory); or use the HTTP API, which needs no keyring: --api URL with --token (env TOOLGATE_API, TOOLGATE_TOKEN);" +
		" or, where Temporal runs unencrypted, --insecure-plaintext-payloads"
}

// skip is for a verb that sends Temporal no payloads (namespace setup): it
// dials without keys and warns of nothing.
func (k *payloadKeys) skip() { k.loaded = true }

// devDefault makes toolgate dev's keyring in its data dir on first start,
// unless the flags name one or turn encryption off.
func (k *payloadKeys) devDefault(dataDir string) (note string, err error) {
	if k.plaintext {
		return "  payloads   unencrypted (--insecure-plaintext-payloads)\n", nil
	}
	var ring *keyring.Keyring
	made := false
	if k.file == "" {
		k.file = filepath.Join(dataDir, devKeysFile)
		ring, made, err = keyring.LoadOrCreate(k.file)
	} else {
		ring, err = keyring.Load(k.file)
	}
	if err != nil {
		return "", usageError("%v", err)
	}
	k.ring, k.loaded = ring, true
	what := "key"
	if made {
		what = "new key"
	}
	return fmt.Sprintf("  payloads   encrypted, %s %s in %s (back it up: without it the histories are unreadable)\n", what, ring.Current(), k.file), nil
}

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make and rotate the keys that encrypt what toolgate puts in Temporal",
		Long: `toolgate encrypts every payload it writes to Temporal (arguments, outputs,
previews, decisions, memos, failures) with AES-256-GCM, under the current
key of a keyring file. Every worker, server and client that talks to
Temporal needs the same file (--keys FILE, env TOOLGATE_KEYS); toolgate dev
makes one in its data dir. Keys retired by rotation stay in the file: they
decrypt the histories written under them. See docs/production.md, "Payload
keys".`,
	}
	newCmd := &cobra.Command{
		Use:   "new FILE",
		Short: "Add a new key to the keyring FILE (making it if need be) and make it current",
		Long: `Add a new key to the keyring and make it the one that encrypts. The keys
before it stay, to decrypt what they wrote. Processes read a key they do
not know from the file when they first meet it; restart them to encrypt
with the new key. With several machines, copy the file to every one.`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			before := 0
			if ring, err := keyring.Load(args[0]); err == nil {
				before = len(ring.List())
			} else if !errors.Is(err, fs.ErrNotExist) {
				return usageError("%v", err)
			}
			k, err := keyring.Rotate(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "key %s is current in %s (%d older kept to decrypt)\n", k.ID, args[0], before)
			return nil
		},
	}
	listCmd := &cobra.Command{
		Use:   "list FILE",
		Short: "List the keys of the keyring FILE: ID, creation time, which one is current",
		Args:  exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ring, err := keyring.Load(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCREATED\tCURRENT")
			for _, k := range ring.List() {
				current := ""
				if k.Current {
					current = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, k.Created.Format(time.RFC3339), current)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(newCmd, listCmd)
	return cmd
}

// addCodecFlags adds the codec endpoint's flags to a command that serves
// HTTP.
func (a *app) addCodecFlags(cmd *cobra.Command) {
	var origins []string
	if v := os.Getenv("TOOLGATE_CODEC_CORS_ORIGINS"); v != "" {
		origins = strings.Split(v, ",")
	}
	cmd.Flags().StringSliceVar(&a.codecOrigins, "codec-cors-origin", origins, "origin whose pages may use the codec endpoint /codec/{namespace}, e.g. the Temporal Web UI's http://localhost:8233; repeatable (env TOOLGATE_CODEC_CORS_ORIGINS, comma-separated)")
	cmd.Flags().IntVar(&a.codecRate, "codec-rate", server.DefaultCodecRate, "decode requests one person may make of the codec endpoint per minute; past it they get 429 until the minute ends")
}
