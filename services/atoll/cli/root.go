// Package cli implements the atoll command line, a client of a region's
// Compute API through the Go SDK (libs/sdk) only: it links no service and
// no NATS client. The embedded region is atoll-dev (services/atoll/devregion)
// and the platform admins' NATS commands atoll-admin (services/atoll/admin).
package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/sdk"
)

// ExitError ends the program with a code, after the message was printed.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// Environment variables that stand in for flags (a flag wins over them,
// they win over the config file).
const (
	EnvConfig  = "ATOLL_CONFIG"
	EnvServer  = "ATOLL_SERVER"
	EnvToken   = "ATOLL_TOKEN"
	EnvProject = "ATOLL_PROJECT"
	EnvCA      = "ATOLL_CA"
)

// globals are the flags every command has.
type globals struct {
	configPath     string
	server         string
	token          string
	project        string
	ca             string
	output         string
	timeout        time.Duration
	requestTimeout time.Duration
	debug          bool
}

// Root returns the atoll command tree.
func Root() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "atoll",
		Short: "Atoll: one compute API in front of zonal Kubernetes clusters",
		Long: `Atoll is a regional compute platform: one Compute API in front of several
zonal Kubernetes member clusters. Run a whole region locally with 'make run'
(atoll-dev), log in to its gateway with 'atoll login', then submit workloads with
'atoll apply -f FILE' and follow them with get, describe, events and logs.

The gateway, token and project come from the flags, else from ATOLL_SERVER,
ATOLL_TOKEN and ATOLL_PROJECT, else from the config file that 'atoll login'
writes (--config, else $ATOLL_CONFIG, else ~/.config/atoll/config.yaml).`,
		Example: `  atoll login --server http://127.0.0.1:8080 --token $TOKEN --project demo
  atoll apply -f deploy/examples/app.yaml
  atoll get apps
  atoll describe app web`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch g.output {
			case "table", "json", "yaml":
				return nil
			}
			return fmt.Errorf("-o %q: want table, json or yaml", g.output)
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&g.configPath, "config", "", "config file (default $ATOLL_CONFIG, else ~/.config/atoll/config.yaml)")
	f.StringVar(&g.server, "server", "", "the gateway's URL (ATOLL_SERVER)")
	f.StringVar(&g.token, "token", "", "API token or JWT (ATOLL_TOKEN)")
	f.StringVarP(&g.project, "project", "p", "", "project (ATOLL_PROJECT)")
	f.StringVar(&g.ca, "ca", "", "PEM file of the CA that signed the gateway's certificate, trusted instead of the system's (ATOLL_CA; login keeps it in the config file)")
	f.StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	f.DurationVar(&g.timeout, "timeout", 30*time.Second, "deadline of a whole command (streams have none)")
	f.DurationVar(&g.requestTimeout, "request-timeout", 15*time.Second, "deadline of one HTTP attempt (retries follow)")
	f.BoolVar(&g.debug, "debug", false, "log every HTTP attempt to standard error")
	root.AddGroup(
		&cobra.Group{ID: "workloads", Title: "Workloads:"},
		&cobra.Group{ID: "debug", Title: "Operations and debugging:"},
		&cobra.Group{ID: "region", Title: "Region, quota and access:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("workloads", applyCmd(g), createCmd(g), getCmd(g), describeCmd(g), deleteCmd(g))
	add("debug", logsCmd(g), execCmd(g), eventsCmd(g), scaleCmd(g), restartCmd(g))
	add("debug", rolloutCmd(g))   // rollout.go
	add("debug", endpointsCmd(g)) // endpoints.go
	add("debug", waitCmd(g))      // wait.go
	for _, op := range []sdk.Operation{sdk.Pause, sdk.Resume, sdk.Stop, sdk.Start} {
		add("debug", operateCmd(g, op))
	}
	add("region", quotaCmd(g), clustersCmd(g), whoamiCmd(g), loginCmd(g))
	add("region", canaryCmd(g))
	add("region", projectCmd(g), memberCmd(g)) // projects.go
	add("region", tokenCmd(g))                 // tokens.go
	add("region", adminCmd(g))                 // sidecars.go
	return root
}

// target is where and as whom the commands talk.
type target struct {
	server, token, project string
}

// resolve merges the flags, the environment and the config file.
func (g *globals) resolve() (target, error) {
	path, err := g.config()
	if err != nil {
		return target{}, err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return target{}, err
	}
	return target{
		server:  first(g.server, os.Getenv(EnvServer), cfg.Server),
		token:   first(g.token, os.Getenv(EnvToken), cfg.Token),
		project: first(g.project, os.Getenv(EnvProject), cfg.Project),
	}, nil
}

// config is the config file's path.
func (g *globals) config() (string, error) {
	if g.configPath != "" {
		return g.configPath, nil
	}
	return DefaultConfigPath()
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// client returns an SDK client of the resolved gateway.
func (g *globals) client(cmd *cobra.Command) (*sdk.Client, target, error) {
	t, err := g.resolve()
	if err != nil {
		return nil, t, err
	}
	if t.server == "" {
		return nil, t, errors.New("no gateway: pass --server URL, set ATOLL_SERVER, or run 'atoll login --server URL --token TOKEN'")
	}
	c, err := g.newClient(cmd.ErrOrStderr(), t.server, t.token)
	return c, t, err
}

func (g *globals) newClient(stderr io.Writer, server, token string) (*sdk.Client, error) {
	opts := []sdk.Option{sdk.WithToken(token), sdk.WithTimeout(g.requestTimeout), sdk.WithUserAgent("atoll-cli/1")}
	ca, err := g.caPEM()
	if err != nil {
		return nil, err
	}
	if ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(ca)) {
			return nil, errors.New("--ca: no PEM certificate in it (or in the config file's ca)")
		}
		opts = append(opts, sdk.WithRootCAs(pool))
	}
	if g.debug {
		log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "atoll-cli")
		opts = append(opts, sdk.WithHooks(sdk.Hooks{
			OnResponse: func(r *http.Request, resp *http.Response, err error, elapsed time.Duration, attempt int) {
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				log.Info("http", "method", r.Method, "url", r.URL.String(), "status", status, "err", err, "elapsed", elapsed.Round(time.Millisecond), "attempt", attempt)
			},
		}))
	}
	return sdk.New(server, opts...)
}

// caPEM is the CA to trust: the file --ca or ATOLL_CA names, else the
// config file's; "" trusts the system's.
func (g *globals) caPEM() (string, error) {
	if file := first(g.ca, os.Getenv(EnvCA)); file != "" {
		b, err := os.ReadFile(file) //nolint:gosec // G304: the CA file the user named
		if err != nil {
			return "", fmt.Errorf("--ca: %w", err)
		}
		return string(b), nil
	}
	path, err := g.config()
	if err != nil {
		return "", err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return "", err
	}
	return cfg.CA, nil
}

// project returns the resolved project, or an error naming how to set one.
func (t target) needProject() (string, error) {
	if t.project == "" {
		return "", errors.New("no project: pass -p PROJECT, set ATOLL_PROJECT, or run 'atoll login --project PROJECT'")
	}
	return t.project, nil
}

// run runs fn with a client and, unless stream, the command's deadline.
func (g *globals) run(stream bool, fn func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		c, t, err := g.client(cmd)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		if !stream {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, g.timeout)
			defer cancel()
		}
		return fn(ctx, cmd, c, t)
	}
}

// PrintError writes err for a person: an API error with its status, code,
// message, every field problem and the broken quota.
func PrintError(w io.Writer, err error) {
	fmt.Fprint(w, "error: ")
	describeError(w, err, "  ")
}

func describeError(w io.Writer, err error, indent string) {
	var e *sdk.Error
	if !errors.As(err, &e) {
		fmt.Fprintln(w, err)
		return
	}
	// Keep what the CLI said around the API error ("check the token: ...").
	if msg, api := err.Error(), e.Error(); msg != api && strings.HasSuffix(msg, api) {
		fmt.Fprint(w, strings.TrimSuffix(msg, api))
	}
	fmt.Fprintf(w, "%s (%d %s): %s\n", e.Body.Code, e.Status, http.StatusText(e.Status), e.Body.Message)
	for _, f := range e.Body.Fields {
		fmt.Fprintf(w, "%s%s: %s (%s)\n", indent, orDash(f.Field), f.Reason, f.Code)
	}
	if q := e.Body.Quota; q != nil {
		fmt.Fprintf(w, "%squota of project %s, tier %s, %s: limit %d, used %d, requested %d\n", indent, q.Project, q.Tier, q.Resource, q.Limit, q.Used, q.Requested)
	}
	if e.Body.RequestId != "" {
		fmt.Fprintf(w, "%srequest id %s\n", indent, e.Body.RequestId)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
