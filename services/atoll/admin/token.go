package admin

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/services/gateway/auth"
)

// tokenCmd makes and revokes the gateway's API tokens in its tokens file.
func tokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create and revoke the gateway's API tokens (its tokens file)",
		Long: `Token edits the gateway's tokens file (--tokens, $ATOLL_GATEWAY_TOKENS),
which keeps each token's SHA-256 digest, subject, roles and expiry. Every
gateway replica reads the file again within seconds of a change: a token
works once it is in the file (as the Secret or volume the gateway mounts)
and stops working once it is removed, with no restart.`,
		Example: `  atoll-admin token create --tokens tokens.yaml --subject ci --role shop=developer --ttl 720h
  atoll-admin token revoke --tokens tokens.yaml --subject ci`,
	}
	cmd.AddCommand(tokenCreateCmd(), tokenRevokeCmd())
	return cmd
}

// EnvGatewayTokens is the gateway's tokens file, as the gateway reads it.
//
//nolint:gosec // G101: the name of an environment variable, not a credential
const EnvGatewayTokens = "ATOLL_GATEWAY_TOKENS"

func tokenCreateCmd() *cobra.Command {
	var (
		path, subject string
		roles         []string
		platformAdmin bool
		ttl           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Add a token to the tokens file and print it (once: only its digest is kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subject == "" {
				return errors.New("--subject is required")
			}
			if ttl <= 0 {
				return errors.New("--ttl must be positive: every token expires")
			}
			id := auth.Identity{Subject: subject, PlatformAdmin: platformAdmin, Roles: map[string]auth.Role{}}
			for _, r := range roles {
				project, role, ok := strings.Cut(r, "=")
				if !ok || project == "" || !auth.Role(role).Valid() {
					return fmt.Errorf("--role %q: want <project>=viewer|developer|admin", r)
				}
				id.Roles[project] = auth.Role(role)
			}
			f, err := readTokens(path)
			if err != nil {
				return err
			}
			tok, entry := auth.Entry(id, time.Now().Add(ttl))
			f.Tokens = append(f.Tokens, entry)
			if err := auth.WriteTokensFile(path, f); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "token of %s added to %s, expires %s\n", subject, path, entry.Expires.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "tokens", os.Getenv(EnvGatewayTokens), "the gateway's tokens file ($"+EnvGatewayTokens+"; made if missing)")
	cmd.Flags().StringVar(&subject, "subject", "", "who holds the token")
	cmd.Flags().StringArrayVar(&roles, "role", nil, "<project>=viewer|developer|admin (repeatable)")
	cmd.Flags().BoolVar(&platformAdmin, "platform-admin", false, "the token may do anything")
	cmd.Flags().DurationVar(&ttl, "ttl", auth.DefaultTokenLifetime, "how long the token works")
	return cmd
}

func tokenRevokeCmd() *cobra.Command {
	var path, subject, token string
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Remove a subject's tokens, or one token, from the tokens file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (subject == "") == (token == "") {
				return errors.New("give one of --subject or --token")
			}
			f, err := readTokens(path)
			if err != nil {
				return err
			}
			n := len(f.Tokens)
			f.Tokens = slices.DeleteFunc(f.Tokens, func(e auth.TokenEntry) bool {
				return (subject != "" && e.Subject == subject) || (token != "" && e.SHA256 == auth.Digest(token))
			})
			if len(f.Tokens) == n {
				return errors.New("no such token in " + path)
			}
			if err := auth.WriteTokensFile(path, f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d token(s) removed from %s\n", n-len(f.Tokens), path)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "tokens", os.Getenv(EnvGatewayTokens), "the gateway's tokens file ($"+EnvGatewayTokens+")")
	cmd.Flags().StringVar(&subject, "subject", "", "remove every token of this subject")
	cmd.Flags().StringVar(&token, "token", "", "remove this token")
	return cmd
}

// readTokens reads the tokens file at path, empty when there is none yet.
func readTokens(path string) (auth.TokensFile, error) {
	if path == "" {
		return auth.TokensFile{}, errors.New("--tokens (or $" + EnvGatewayTokens + ") is required")
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return auth.TokensFile{}, nil
	}
	return auth.ReadTokensFile(path)
}
