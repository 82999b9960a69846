// Package admin implements atoll-admin, the platform admins' commands
// that talk to a region's NATS directly, as its admin user, rather than
// to the Compute API: bootstrap (the streams, buckets and NATS users),
// remediation and upgrade. The atoll CLI users install is a client of the
// Compute API only (services/atoll/cli).
package admin

import (
	"github.com/spf13/cobra"
)

// Root returns the atoll-admin command tree.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:   "atoll-admin",
		Short: "Atoll's platform admin commands, over the region's NATS as its admin user",
		Long: `atoll-admin holds the commands a platform admin runs against the region's
NATS itself, as its admin user (--creds, $ATOLL_NATS_CREDS): bootstrap makes
the NATS users and the streams and buckets, remediation and upgrade steer
those services, token edits the gateway's tokens file, rotate-kek rewraps
the Secrets' data keys for a new key-encryption key. Everything else, tenants' and admins' alike, goes through
the Compute API with the atoll command.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(bootstrapCmd(), remediationCmd(), upgradeCmd(), tokenCmd(), rotateKEKCmd())
	return root
}
