package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// quotaFlags are the limits `quota --set` changes.
type quotaFlags struct {
	tier, cpu, memory, storage string
	gpus, pods                 int64
}

// quotaFlagNames are the amounts `quota --set` takes.
var quotaFlagNames = []string{"cpu", "memory", "storage", "gpus", "pods"}

// limits returns the tier's limit with the flags that were given
// applied: cur is the tier's as shown, and own says whether the project
// has a limit of its own for it (otherwise the amounts not given keep
// following the region's default).
func (q quotaFlags) limits(cur computeapi.Resources, own bool, changed func(string) bool) (computeapi.QuotaLimit, error) {
	var out computeapi.QuotaLimit
	if own {
		out = computeapi.QuotaLimit{MilliCPU: new(cur.MilliCPU), MemoryBytes: new(cur.MemoryBytes), Gpus: new(cur.Gpus), Pods: new(cur.Pods), StorageBytes: new(cur.StorageBytes)}
	}
	bytes := func(flag, v string) (*int64, error) {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("--%s %q: want bytes such as 64Gi or 512Mi", flag, v)
		}
		return new(q.Value()), nil
	}
	var err error
	if changed("cpu") {
		v, perr := resource.ParseQuantity(q.cpu)
		if perr != nil || v.Sign() < 0 {
			return out, fmt.Errorf("--cpu %q: want cores such as 4 or 500m", q.cpu)
		}
		out.MilliCPU = new(v.MilliValue())
	}
	if changed("memory") {
		if out.MemoryBytes, err = bytes("memory", q.memory); err != nil {
			return out, err
		}
	}
	if changed("storage") {
		if out.StorageBytes, err = bytes("storage", q.storage); err != nil {
			return out, err
		}
	}
	if changed("gpus") {
		out.Gpus = new(q.gpus)
	}
	if changed("pods") {
		out.Pods = new(q.pods)
	}
	for _, v := range []*int64{out.Gpus, out.Pods} {
		if v != nil && *v < 0 {
			return out, errors.New("limits must be 0 (forbidden) or more")
		}
	}
	return out, nil
}

// canonicalTier accepts a tier in any case.
func canonicalTier(s string) (string, error) {
	for _, t := range sdk.Tiers {
		if strings.EqualFold(t, s) {
			return t, nil
		}
	}
	return "", fmt.Errorf("--set %q: want one of %s", s, strings.Join(sdk.Tiers, ", "))
}

func quotaCmd(g *globals) *cobra.Command {
	var q quotaFlags
	cmd := &cobra.Command{
		Use:   "quota [--set TIER [--cpu C] [--memory M] [--storage S] [--gpus G] [--pods P]]",
		Short: "Show a project's quota and usage per tier, or set a tier's limits",
		Long: `quota shows, per tier (Reserved, OnDemand, Preemptible), what the project
uses over its cap, and its workloads over the most it may hold. Quota
denies by default: a tier the project has no limit of its own for shows
the region's default caps (marked default), and a cap of 0 forbids the
resource. --set TIER changes that tier's limits (platform admins): only
the amounts given change, 0 forbids a resource; there is no unlimited.
A project's admins ask for more with 'atoll quota request'; platform admins
review with 'atoll quota requests', 'approve' and 'reject'.`,
		Example: `  atoll quota -p demo
  atoll quota -p demo --set OnDemand --cpu 64 --memory 256Gi --pods 200`,
		Args: cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			if q.tier == "" && slices.ContainsFunc(quotaFlagNames, fl.Changed) {
				return errors.New("--cpu, --memory, --storage, --gpus and --pods need --set TIER")
			}
			quota, err := c.Quota(ctx, project)
			if err != nil {
				return err
			}
			if q.tier != "" {
				tier, err := canonicalTier(q.tier)
				if err != nil {
					return err
				}
				var (
					cur computeapi.Resources
					own bool
				)
				for _, tq := range quota.Tiers {
					if tq.Tier == tier {
						cur, own = tq.Limit, !tq.Default
					}
				}
				lim, err := q.limits(cur, own, fl.Changed)
				if err != nil {
					return err
				}
				if quota, err = c.SetQuota(ctx, project, tier, lim); err != nil {
					return err
				}
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, quota)
			}
			printQuota(cmd.OutOrStdout(), *quota)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&q.tier, "set", "", "set this tier's limits: Reserved, OnDemand or Preemptible")
	f.StringVar(&q.cpu, "cpu", "", "CPU limit in cores (4, 500m)")
	f.StringVar(&q.memory, "memory", "", "memory limit (64Gi, 512Mi)")
	f.StringVar(&q.storage, "storage", "", "storage limit: scratch volumes' size limits and volume claims (100Gi)")
	f.Int64Var(&q.gpus, "gpus", 0, "GPU limit (0: none allowed)")
	f.Int64Var(&q.pods, "pods", 0, "pod limit")
	cmd.AddCommand(quotaRequestCmds(g)...)
	return cmd
}

// parseLabels reads k=v pairs.
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func clustersCmd(g *globals) *cobra.Command {
	var (
		cordon, uncordon bool
		labels, remove   []string
	)
	cmd := &cobra.Command{
		Use:   "clusters [NAME] [--cordon|--uncordon] [--label k=v ...] [--remove-label k ...]",
		Short: "List the member clusters, show one, cordon it or edit its labels (platform admins)",
		Long: `clusters lists the region's member clusters: zone, health, whether cordoned,
ready nodes, requested over allocatable CPU, pods and GPUs, and labels.
With NAME it shows that cluster's pools. --cordon stops new shards from
going to the cluster (running ones stay), --uncordon undoes it; --label and
--remove-label edit the labels the scheduler's affinity matches.`,
		Example: `  atoll clusters
  atoll clusters zone-a --cordon
  atoll clusters zone-b --label gpu=a100 --remove-label canary`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := parseLabels(labels)
			if err != nil {
				return err
			}
			change := cordon || uncordon || len(set) > 0 || len(remove) > 0
			if cordon && uncordon {
				return errors.New("--cordon and --uncordon exclude each other")
			}
			if change && len(args) == 0 {
				return errors.New("--cordon, --uncordon, --label and --remove-label need a cluster NAME")
			}
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				out := cmd.OutOrStdout()
				if len(args) == 0 {
					cs, err := c.Clusters(ctx)
					if err != nil {
						return err
					}
					slices.SortFunc(cs, func(a, b computeapi.Cluster) int { return strings.Compare(a.Name, b.Name) })
					if g.output != "table" {
						return printData(out, g.output, computeapi.ClusterList{Items: cs})
					}
					printClusters(out, cs)
					return nil
				}
				name := args[0]
				var cl *computeapi.Cluster
				if cordon || uncordon {
					if cl, err = c.Cordon(ctx, name, cordon); err != nil {
						return err
					}
				}
				if len(set) > 0 || len(remove) > 0 {
					if cl, err = c.EditLabels(ctx, name, set, remove); err != nil {
						return err
					}
				}
				if cl == nil {
					if cl, err = c.Cluster(ctx, name); err != nil {
						return err
					}
				}
				if g.output != "table" {
					return printData(out, g.output, cl)
				}
				describeCluster(out, *cl, time.Now())
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cordon, "cordon", false, "send no new shards to the cluster")
	f.BoolVar(&uncordon, "uncordon", false, "undo --cordon")
	f.StringArrayVar(&labels, "label", nil, "set a label key=value (repeatable)")
	f.StringArrayVar(&remove, "remove-label", nil, "remove a label by key (repeatable)")
	return cmd
}

func whoamiCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "whoami",
		Short:   "Show who the gateway takes you for, and your role per project",
		Example: "  atoll whoami -o json",
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			id, err := c.WhoAmI(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output != "table" {
				return printData(out, g.output, id)
			}
			tw := newTable(out)
			fmt.Fprintf(tw, "Subject:\t%s\nPlatform admin:\t%v\nGateway:\t%s\n", id.Subject, id.PlatformAdmin, c.Server())
			if t.project != "" {
				fmt.Fprintf(tw, "Project:\t%s\n", t.project)
			}
			tw.Flush()
			if len(id.Roles) > 0 {
				fmt.Fprintf(out, "\nRoles:\n")
				tw = newTable(out)
				fmt.Fprintf(tw, "  PROJECT\tROLE\n")
				for _, p := range sortedKeys(id.Roles) {
					fmt.Fprintf(tw, "  %s\t%s\n", p, id.Roles[p])
				}
				tw.Flush()
			}
			return nil
		}),
	}
}

func loginCmd(g *globals) *cobra.Command {
	var skipVerify bool
	cmd := &cobra.Command{
		Use:   "login --server URL --token TOKEN [--project P]",
		Short: "Save the gateway, token and default project to the config file",
		Long: `login checks the token against the gateway (whoami) and writes the gateway's
URL, the token and the default project to the config file (--config, else
$ATOLL_CONFIG, else ~/.config/atoll/config.yaml), readable by you only
(mode 0600). What is not given is kept from the file. --ca names the PEM
file of the CA that signed the gateway's certificate, when that is not one
the system trusts (atoll-dev's is <dir>/tls/ca.crt): its certificates are
kept in the config file and trusted by every later command.`,
		Example: `  atoll login --server https://127.0.0.1:8080 --ca .atoll-dev/tls/ca.crt --token $ATOLL_TOKEN --project demo
  atoll login --project other`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := g.config()
			if err != nil {
				return err
			}
			cfg, err := LoadConfig(path)
			if err != nil {
				return err
			}
			cfg.Server = first(g.server, cfg.Server)
			cfg.Token = first(g.token, cfg.Token)
			cfg.Project = first(g.project, cfg.Project)
			if ca, err := g.caPEM(); err != nil {
				return err
			} else if ca != "" {
				cfg.CA = ca
			}
			if cfg.Server == "" || cfg.Token == "" {
				return errors.New("login needs --server URL and --token TOKEN")
			}
			out := cmd.OutOrStdout()
			if !skipVerify {
				c, err := g.newClient(cmd.ErrOrStderr(), cfg.Server, cfg.Token)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				defer cancel()
				id, err := c.WhoAmI(ctx)
				if err != nil {
					return fmt.Errorf("check the token against %s: %w", cfg.Server, err)
				}
				fmt.Fprintf(out, "Logged in to %s as %s.\n", cfg.Server, id.Subject)
			}
			if err := SaveConfig(path, cfg); err != nil {
				return err
			}
			fmt.Fprintf(out, "Config written to %s", path)
			if cfg.Project != "" {
				fmt.Fprintf(out, " (project %s)", cfg.Project)
			}
			fmt.Fprintln(out, ".")
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipVerify, "skip-verify", false, "write the config without asking the gateway")
	return cmd
}
