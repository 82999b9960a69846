package admin

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
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

// rotateKEKCmd is `atoll-admin rotate-kek --to ID`: it has the propagator
// rewrap every stored Secret's data key for the KEK ID, a batch per call,
// printing progress, and says which KEKs are still referenced.
func rotateKEKCmd() *cobra.Command {
	var (
		url, creds, ca, to string
		limit              int
		wait               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate-kek",
		Short: "Rewrap every Secret's data key for a new key-encryption key (no downtime)",
		Long: `Rotate-kek has the propagator, which alone holds the private key-encryption
keys, unwrap each stored Secret's data key and wrap it for --to; admission,
the workloads bucket's one writer, stores each (a compare-and-set on the
revision read, so a Secret written meanwhile is simply looked at again). No
value is decrypted into any reply or re-encrypted, and Secrets keep opening
throughout: the propagator holds the old key and the new one.

Before it: 'atoll-admin bootstrap kek --id <new>'; add kek-<new>.key to the
propagator's --kek-dir (keep the old one); replace admission's --kek-public
file with kek-<new>.pub (both are read again without a restart). Admission
refuses a rewrap for a key it does not seal for, so that no new Secret is
sealed under the old key afterwards. When this reports no Secret under the
old key, remove its private key from the propagator's directory.

It talks to the region's NATS as the admin user, as bootstrap does.`,
		Example: `  atoll-admin rotate-kek --to k2`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			b, err := bus.Open(ctx, bus.Config{URL: url, Name: "atoll-rotate-kek", SkipEnsure: true}.WithCredentials(creds).WithCA(ca))
			if err != nil {
				return err
			}
			defer b.Close()
			r := bus.NewRequester(b.NC, bus.RequestPolicy{})
			res, err := rotateKEK(ctx, cmd.OutOrStdout(), r, api.KEKRotation{To: to, Limit: limit})
			if err != nil {
				return err
			}
			if res.Pending > 0 {
				return fmt.Errorf("%d Secrets still sealed under another kek than %s; run rotate-kek again", res.Pending, to)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "the KEK to rewrap for (admission must seal for it, the propagator hold it)")
	f.IntVar(&limit, "batch", 100, "Secrets rewrapped per request")
	f.StringVar(&url, "nats", envOr(EnvNATSURL, "nats://127.0.0.1:4222"), "NATS server URLs, comma-separated ($"+EnvNATSURL+")")
	f.StringVar(&creds, "creds", os.Getenv(EnvNATSCreds), "the admin user's credentials file ($"+EnvNATSCreds+")")
	f.StringVar(&ca, "nats-ca", os.Getenv(bus.EnvCAFile), "PEM CA file to verify the NATS servers with, over TLS ($"+bus.EnvCAFile+")")
	f.DurationVar(&wait, "wait", 30*time.Minute, "deadline of the command")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// rotateStuck is how many calls in a row may rewrap nothing (Secrets
// written meanwhile, admission not yet sealing for the new key) before
// rotateKEK gives up.
const rotateStuck = 5

// rotateKEK calls bus.PropagatorRotateKEK until no Secret is pending (or
// calls stop making progress), printing each call's progress to out, then
// the count and which KEKs are still referenced. It returns the last
// call's result.
func rotateKEK(ctx context.Context, out io.Writer, r *bus.Requester, req api.KEKRotation) (api.KEKRotationResult, error) {
	var (
		res   api.KEKRotationResult
		total int
	)
	for stuck := 0; ; {
		var err error
		res, err = bus.PropagatorRotateKEK.Call(ctx, r, req)
		if err != nil {
			return res, err
		}
		total += res.Rewrapped
		fmt.Fprintf(out, "rewrapped %d (%d in all), %d of %d Secrets pending\n", res.Rewrapped, total, res.Pending, res.Secrets)
		for _, f := range res.Failed {
			fmt.Fprintf(out, "  not yet: %s\n", f)
		}
		if res.Pending == 0 {
			break
		}
		if res.Rewrapped > 0 {
			stuck = 0
			continue
		}
		if stuck++; stuck >= rotateStuck {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Duration(stuck) * time.Second):
		}
	}
	fmt.Fprintf(out, "%d Secrets rewrapped for kek %s; %d Secrets in all, %d under %s\n", total, req.To, res.Secrets, res.Keys[req.To], req.To)
	old := false
	for _, id := range slices.Sorted(maps.Keys(res.Keys)) {
		if id != req.To {
			old = true
			fmt.Fprintf(out, "kek %s: still referenced by %d Secrets: keep its private key\n", id, res.Keys[id])
		}
	}
	if !old {
		fmt.Fprintf(out, "no Secret references any kek but %s: the older private keys can be removed from the propagator's --kek-dir\n", req.To)
	}
	return res, nil
}
