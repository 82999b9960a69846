package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/busclient"
)

// documents splits a YAML stream on '---' lines and drops empty documents.
func documents(r io.Reader) ([][]byte, error) {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), " \t") == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text())
		cur.WriteByte('\n')
	}
	flush()
	return docs, sc.Err()
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func applyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the workloads in a YAML file (several documents allowed)",
		Example: `  atoll apply -f deploy/examples/app.yaml
  cat app.yaml | atoll apply -f -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("-f FILE is required (use - for standard input)")
			}
			in := io.Reader(os.Stdin)
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			docs, err := documents(in)
			if err != nil {
				return fmt.Errorf("read %s: %w", file, err)
			}
			if len(docs) == 0 {
				return fmt.Errorf("%s holds no documents", file)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			c, closeFn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			failed := 0
			for i, doc := range docs {
				j, err := yaml.YAMLToJSON(doc)
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "document %d: malformed YAML: %v\n", i+1, err)
					failed++
					continue
				}
				if g.project != "" {
					j = withProject(j, g.project)
				}
				w, err := c.Apply(ctx, j)
				if err != nil {
					printRejection(cmd.ErrOrStderr(), i+1, err)
					failed++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s applied (project %s, generation %d)\n",
					strings.ToLower(w.Kind), w.Metadata.Name, w.Metadata.Project, w.Metadata.Generation)
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "YAML file of workloads, - for standard input")
	return cmd
}

// withProject sets metadata.project when the document has none.
func withProject(j []byte, project string) []byte {
	var m map[string]any
	if json.Unmarshal(j, &m) != nil {
		return j
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	if _, ok := md["project"]; !ok {
		md["project"] = project
	}
	out, err := json.Marshal(m)
	if err != nil {
		return j
	}
	return out
}

func printRejection(w io.Writer, doc int, err error) {
	var e *busclient.Error
	if !errors.As(err, &e) {
		fmt.Fprintf(w, "document %d: %v\n", doc, err)
		return
	}
	fmt.Fprintf(w, "document %d rejected (%d %s): ", doc, e.Status, e.Body.Code)
	if len(e.Body.Fields) == 0 {
		fmt.Fprintln(w, e.Body.Message)
		return
	}
	fmt.Fprintln(w)
	for _, f := range e.Body.Fields {
		fmt.Fprintf(w, "  %s: %s (%s)\n", orDash(f.Field), f.Reason, f.Code)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func kindName(s string) (string, error) {
	for _, k := range api.KindNames() {
		if strings.EqualFold(k, s) {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown kind %q; one of %s", s, strings.Join(api.KindNames(), ", "))
}

func getCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "get KIND NAME",
		Short:   "Show a workload's status: phase, ready pods per zone, why it is pending, latest events",
		Example: "  atoll get app web -p demo\n  atoll get jobset render -p demo -o json",
		Args:    cobra.ExactArgs(2),
		RunE: g.onWorkload(func(ctx context.Context, cmd *cobra.Command, c *busclient.Client, kind, name string) error {
			key := api.Key(g.project, kind, name)
			w, err := c.Workload(ctx, key)
			if err != nil {
				return err
			}
			if w == nil {
				return fmt.Errorf("%s %s not found in project %s", strings.ToLower(kind), name, g.project)
			}
			st, err := c.Status(ctx, key)
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), output, w, st)
		}),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}

func printStatus(out io.Writer, format string, w *api.Workload, st *api.Status) error {
	switch format {
	case "json", "yaml":
		doc := map[string]any{"workload": w, "status": st}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		}
		_, err = out.Write(append(b, '\n'))
		return err
	case "table":
	default:
		return fmt.Errorf("-o %q: one of table, json, yaml", format)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	phase, ready := api.PhasePending, "0/0"
	if st != nil {
		phase, ready = st.Phase, fmt.Sprintf("%d/%d", st.Ready, st.Desired)
	}
	fmt.Fprintf(tw, "NAME\tKIND\tPHASE\tREADY\tGENERATION\n%s\t%s\t%s\t%s\t%d\n", w.Metadata.Name, w.Kind, phase, ready, w.Metadata.Generation)
	if st == nil {
		return nil
	}
	if len(st.Zones) > 0 {
		fmt.Fprintf(tw, "\nZONE\tDESIRED\tREADY\tRUNNING\tSUCCEEDED\n")
		zones := make([]string, 0, len(st.Zones))
		for z := range st.Zones {
			zones = append(zones, z)
		}
		slices.Sort(zones)
		for _, z := range zones {
			zs := st.Zones[z]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", z, zs.Desired, zs.Ready, zs.Running, zs.Succeeded)
		}
	}
	if len(st.Reasons) > 0 {
		fmt.Fprintf(tw, "\nCLUSTER\tFILTER\tWHY NOT\n")
		for _, r := range st.Reasons {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", orDash(r.Cluster), r.Filter, r.Reason)
		}
	}
	if len(st.Events) > 0 {
		fmt.Fprintf(tw, "\nTIME\tCLUSTER\tOBJECT\tREASON\tMESSAGE\n")
		for _, e := range st.Events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Format("15:04:05"), e.Cluster, e.Object, e.Reason, e.Message)
		}
	}
	return nil
}

func deleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete KIND NAME",
		Short:   "Delete a workload: its objects are removed from every member cluster",
		Example: "  atoll delete app web -p demo",
		Args:    cobra.ExactArgs(2),
		RunE: g.onWorkload(func(ctx context.Context, cmd *cobra.Command, c *busclient.Client, kind, name string) error {
			if err := c.Delete(ctx, g.project, kind, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s deleted\n", strings.ToLower(kind), name)
			return nil
		}),
	}
}

func quotaCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show a project's quota and usage per tier",
		RunE: g.withClient(func(ctx context.Context, cmd *cobra.Command, c *busclient.Client) error {
			if g.project == "" {
				return errors.New("--project (-p) is required")
			}
			l, err := c.Quota(ctx, g.project)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			defer tw.Flush()
			fmt.Fprintf(tw, "TIER\tCPU (m)\tMEMORY (MiB)\tGPU\tPODS\n")
			for _, t := range api.Tiers {
				u, lim := l.Used(t), l.Limits[t]
				fmt.Fprintf(tw, "%s\t%d/%s\t%d/%s\t%d/%s\t%d/%s\n", t,
					u.MilliCPU, limit(lim.MilliCPU, 1), u.MemoryBytes>>20, limit(lim.MemoryBytes, 1<<20), u.GPUs, limit(lim.GPUs, 1), u.Pods, limit(lim.Pods, 1))
			}
			return nil
		}),
	}
	return cmd
}

func limit(v, unit int64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v / unit)
}

func clustersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "clusters",
		Short: "List member clusters: zone, health, nodes and free capacity",
		RunE: g.withClient(func(ctx context.Context, cmd *cobra.Command, c *busclient.Client) error {
			cs, err := c.Clusters(ctx)
			if err != nil {
				return err
			}
			slices.SortFunc(cs, func(a, b api.ClusterInfo) int { return strings.Compare(a.Name, b.Name) })
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			defer tw.Flush()
			fmt.Fprintf(tw, "NAME\tZONE\tHEALTHY\tNODES\tCPU REQ/ALLOC\tPODS\tGPU\n")
			for _, ci := range cs {
				var nodes, ready int
				var alloc, req api.Quantities
				var ap, rp int64
				for _, p := range ci.Pools {
					nodes += p.Nodes
					ready += p.ReadyNodes
					alloc.MilliCPU += p.Allocatable.MilliCPU
					req.MilliCPU += p.Requested.MilliCPU
					alloc.GPUs += p.Allocatable.GPUs
					req.GPUs += p.Requested.GPUs
					ap += p.AllocatablePods
					rp += p.RequestedPods
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%d/%d\t%dm/%dm\t%d/%d\t%d/%d\n", ci.Name, ci.Zone, ci.Healthy, ready, nodes, req.MilliCPU, alloc.MilliCPU, rp, ap, req.GPUs, alloc.GPUs)
			}
			return nil
		}),
	}
}

// onWorkload runs fn for a KIND NAME command in --project, connected.
func (g *globals) onWorkload(fn func(ctx context.Context, cmd *cobra.Command, c *busclient.Client, kind, name string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		kind, err := kindName(args[0])
		if err != nil {
			return err
		}
		if g.project == "" {
			return errors.New("--project (-p) is required")
		}
		return g.withClient(func(ctx context.Context, cmd *cobra.Command, c *busclient.Client) error {
			return fn(ctx, cmd, c, kind, args[1])
		})(cmd, args)
	}
}

// withClient runs fn connected to the region, within --timeout.
func (g *globals) withClient(fn func(ctx context.Context, cmd *cobra.Command, c *busclient.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
		defer cancel()
		c, closeFn, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer closeFn()
		return fn(ctx, cmd, c)
	}
}
