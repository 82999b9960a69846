package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/sdk"
)

// tokenCmd is `atoll token create|list|revoke`.
func tokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage a project's tokens for machines (the project's admins)",
		Long: `A project token lets a machine (CI, a service) act in one project with one
role (viewer, developer, admin) until it expires or is revoked. Its secret is
shown once, when it is created; the region keeps only its digest. A revoked
token stops working at every gateway within a second. Tokens are managed by
the project's admins signed in as themselves: a token cannot create tokens.`,
		Example: `  atoll token create -p web --role developer --ttl 720h --name ci
  atoll token list -p web
  atoll token revoke ci -p web`,
	}
	cmd.AddCommand(tokenCreateCmd(g), tokenListCmd(g), tokenRevokeCmd(g))
	return cmd
}

func tokenCreateCmd(g *globals) *cobra.Command {
	var (
		name, role string
		ttl        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME --role viewer|developer|admin --ttl DURATION -p PROJECT",
		Short: "Create a project token and print its secret (shown this once)",
		Long: `create makes a token named NAME (a DNS label, unique in the project) with
the role in the project for the lifetime --ttl (at most 8784h). The secret is
printed alone on standard output, so that a script can keep it:
  TOKEN=$(atoll token create -p web --role developer --ttl 720h --name ci)`,
		Example: "  atoll token create -p web --role developer --ttl 720h --name ci",
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			if ttl <= 0 {
				return errors.New("--ttl: a lifetime above zero, e.g. 720h")
			}
			tok, err := c.CreateToken(ctx, project, name, role, ttl)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, tok)
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok.Secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s in project %s) expires %s; its secret is shown this once\n",
				tok.Name, tok.Role, tok.Project, tok.Expires.Local().Format(time.RFC3339))
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the token's name (required)")
	f.StringVar(&role, "role", "", "viewer, developer or admin (required)")
	f.DurationVar(&ttl, "ttl", 0, "how long the token works, e.g. 720h (required)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("role")
	_ = cmd.MarkFlagRequired("ttl")
	return cmd
}

func tokenListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list -p PROJECT",
		Short:   "List a project's tokens: name, role, creator, created, expires, last used",
		Example: "  atoll token list -p web\n  atoll token list -p web -o json",
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			ts, err := c.Tokens(ctx, project)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, ts)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tROLE\tCREATED BY\tCREATED\tEXPIRES\tLAST USED")
			for _, tok := range ts {
				used := "never"
				if !tok.LastUsed.IsZero() {
					used = tok.LastUsed.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", tok.Name, tok.Role, tok.CreatedBy,
					tok.Created.Local().Format(time.RFC3339), tok.Expires.Local().Format(time.RFC3339), used)
			}
			return tw.Flush()
		}),
	}
}

func tokenRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME -p PROJECT",
		Short:   "Revoke a project token (refused everywhere within a second)",
		Example: "  atoll token revoke ci -p web",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				if err := c.RevokeToken(ctx, project, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "token %s of project %s revoked\n", args[0], project)
				return nil
			})(cmd, args)
		},
	}
}
