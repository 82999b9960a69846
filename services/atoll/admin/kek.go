package admin

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"atoll.dev/libs/envelope"
)

// bootstrapKEKCmd makes a key-encryption key offline: the pair Secrets
// are sealed for (admission, the public key) and opened with (the
// propagator, the private key).
func bootstrapKEKCmd() *cobra.Command {
	var dir, id string
	cmd := &cobra.Command{
		Use:   "kek",
		Short: "Make a key-encryption key for Secrets (X25519)",
		Long: `KEK writes a new key-encryption key into --dir, with Go's crypto and nothing online:

  kek-<id>.key  the private key (mode 0600): mount it into the propagator
                only (--kek-dir, every kek-<id>.key there); it alone opens
                Secrets
  kek-<id>.pub  the public key, "<id> <base64>" (0644): admission's
                --kek-public; admission seals with it and can open nothing

A Secret's values are encrypted with a fresh data key per version, wrapped for
the KEK (libs/envelope). An existing key is never replaced. To rotate: make a
new KEK, add its private key to the propagator's directory, replace
admission's public key file with the new one (both are read again without a
restart), then 'atoll-admin rotate-kek --to <id>' rewraps every stored data
key; once it reports the old key unreferenced, remove the old private key.`,
		Example: `  atoll-admin bootstrap kek --dir deploy/compose/secrets/kek --id k1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := envelope.GenerateKEK(dir, id); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "private: %s (the propagator's --kek-dir only)\n", filepath.Join(dir, envelope.PrivateFile(id)))
			fmt.Fprintf(out, "public:  %s (admission's --kek-public)\n", filepath.Join(dir, envelope.PublicFile(id)))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory the key files are written into (created when missing)")
	f.StringVar(&id, "id", "", "the key's id, a DNS label (e.g. k1, 2026-11); stored Secrets name it")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}
