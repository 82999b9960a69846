package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/api"
	"atoll.dev/libs/sdk"
)

// eventCredsCmd is `atoll events credentials [list|revoke]`.
func eventCredsCmd(g *globals) *cobra.Command {
	var (
		req api.EventCredentialRequest
		env bool
	)
	cmd := &cobra.Command{
		Use:   "credentials [--name NAME] [--ttl DURATION] [--env]",
		Short: "Issue NATS credentials that read only the project's events (project admins)",
		Long: `credentials issues NATS credentials for a service of your own that
subscribes to the project's events: it may subscribe to atoll.evt.<project>.>
(each event carries CloudEvents attributes as ce-* headers) and to its own
inboxes, where its durable consumer ev_<project>_<name> on the ATOLL_EVENTS
stream pushes the project's events (ATOLL_EVENTS_DELIVER), and publish
nothing: no other project's events, no platform subject. The durable
consumer keeps its place while nobody subscribes to its subject, so a
subscriber that restarts gets what it missed, as long as the stream holds
it: 7 days (or until the stream holds 512 MiB).

The password is shown once; --env prints the credentials as shell exports
(NATS_URL, NATS_USER, NATS_PASSWORD, which the NATS CLI reads, and
NATS_INBOX_PREFIX and ATOLL_EVENTS_DELIVER, which deploy/examples/subscriber
reads). 'atoll events credentials revoke NAME'
revokes them: their connections are closed within seconds and their
consumer is deleted.`,
		Example: `  atoll events credentials -p web --name billing
  eval "$(atoll events credentials -p web --name billing --env)"
  nats sub 'atoll.evt.web.>'
  nats sub "$ATOLL_EVENTS_DELIVER"    # the durable consumer: what happened while you were away
  atoll events credentials list -p web
  atoll events credentials revoke billing -p web`,
		Args: cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			out, err := c.CreateEventCredentials(ctx, project, req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if g.output != "table" {
				return printData(w, g.output, out)
			}
			if !env {
				fmt.Fprintf(w, "# events credentials %s/%s: the password is shown this once.\n", out.Project, out.Name)
				fmt.Fprintf(w, "# subjects %s; durable consumer %s on stream %s\n", out.Subject, out.Consumer, out.Stream)
			}
			printEventCredsEnv(w, out)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "subscriber", "the credentials' name in the project (also names their durable consumer)")
	f.StringVar(&req.TTL, "ttl", "", "how long they work (e.g. 720h; default until revoked)")
	f.BoolVar(&env, "env", false, "print only the shell exports")
	cmd.AddCommand(eventCredsListCmd(g), eventCredsRevokeCmd(g))
	return cmd
}

// printEventCredsEnv prints cred as shell exports.
func printEventCredsEnv(w io.Writer, cred *api.EventCredential) {
	fmt.Fprintf(w, "export NATS_URL=%s\n", shellQuote(cred.Servers))
	fmt.Fprintf(w, "export NATS_USER=%s\n", shellQuote(cred.User))
	fmt.Fprintf(w, "export NATS_PASSWORD=%s\n", shellQuote(cred.Password))
	fmt.Fprintf(w, "export NATS_INBOX_PREFIX=%s\n", shellQuote(cred.InboxPrefix))
	fmt.Fprintf(w, "export ATOLL_EVENTS_DELIVER=%s\n", shellQuote(cred.Deliver))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += `'\''`
			continue
		}
		out += string(r)
	}
	return out + "'"
}

func eventCredsListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the project's events credentials (never their passwords)",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			items, err := c.EventCredentials(ctx, project)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, map[string]any{"items": items})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUSER\tCONSUMER\tCREATOR\tCREATED\tEXPIRES")
			for _, it := range items {
				exp := "never"
				if it.Expires != nil {
					exp = it.Expires.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.Name, it.User, it.Consumer, it.Creator, it.Created.Format(time.RFC3339), exp)
			}
			return tw.Flush()
		}),
	}
}

func eventCredsRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke events credentials: close their connections, delete their consumer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				if err := c.RevokeEventCredentials(ctx, project, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "events credentials %s/%s revoked\n", project, args[0])
				return nil
			})(cmd, args)
		},
	}
}
