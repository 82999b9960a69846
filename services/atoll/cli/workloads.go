package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// readDocuments reads the documents of -f files (- is standard input).
func readDocuments(stdin io.Reader, files []string) ([][]byte, error) {
	if len(files) == 0 {
		return nil, errors.New("-f FILE is required (- for standard input)")
	}
	var docs [][]byte
	for _, file := range files {
		in := stdin
		if file != "-" {
			f, err := os.Open(file) //nolint:gosec // G304: the file the user named with -f
			if err != nil {
				return nil, err
			}
			defer f.Close()
			in = f
		}
		d, err := sdk.SplitDocuments(in)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		docs = append(docs, d...)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%v: no documents", files)
	}
	return docs, nil
}

func applyCmd(g *globals) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "apply -f FILE|-",
		Short: "Create or update the workloads of YAML or JSON files",
		Long: `apply creates each workload of the files, or updates it when it exists.
A file holds one or more documents (YAML separated by '---' lines, or JSON).
A document's metadata.project wins over -p. Every document is tried; the
command fails if any was rejected, naming each field problem.`,
		Example: `  atoll apply -f deploy/examples/app.yaml
  cat app.yaml | atoll apply -f - -p demo
  atoll apply -f app.yaml -f jobset.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			docs, err := readDocuments(cmd.InOrStdin(), files)
			if err != nil {
				return err
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			var applied []computeapi.Workload
			failed := 0
			for i, raw := range docs {
				d, err := sdk.ParseDocument(raw)
				if err != nil {
					fmt.Fprintf(errOut, "document %d: %v\n", i+1, err)
					failed++
					continue
				}
				w, created, err := c.ApplyDocument(ctx, t.project, d)
				if err != nil {
					fmt.Fprintf(errOut, "document %d (%s) rejected: ", i+1, ref(d.Kind, d.Name))
					describeError(errOut, err, "  ")
					failed++
					continue
				}
				applied = append(applied, *w)
				if g.output == "table" {
					verb := "configured"
					if created {
						verb = "created"
					}
					fmt.Fprintf(out, "%s %s (project %s, generation %d)\n", ref(w.Kind, w.Metadata.Name), verb, w.Metadata.Project, w.Metadata.Generation)
				}
			}
			if g.output != "table" {
				if err := printData(out, g.output, computeapi.WorkloadList{Items: applied}); err != nil {
					return err
				}
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file of workloads, - for standard input (repeatable)")
	return cmd
}

func getCmd(g *globals) *cobra.Command {
	var selector, phaseFilter string
	cmd := &cobra.Command{
		Use:   "get [KIND [NAME]]",
		Short: "List a project's workloads, or show one",
		Long: `get lists the project's workloads (every kind, a table per kind, or one
kind) with their phase, ready pods over desired, ready pods per zone and
age, or shows one workload (an App with its ports, region-wide address,
endpoints per zone and external exposure). -o json or -o yaml prints the
documents with their full status. KIND, in any case, singular or plural, is one of:
` + kindList(kindNames()) + `.`,
		Example: `  atoll get
  atoll get apps -l team=web --phase Running
  atoll get app web -o yaml`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var kind string
			if len(args) > 0 {
				k, err := kindName(args[0])
				if err != nil {
					return err
				}
				kind = k
			}
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(args) == 2 {
					w, err := c.Get(ctx, project, kind, args[1])
					if err != nil {
						return fmt.Errorf("get %s in project %s: %w", ref(kind, args[1]), project, err)
					}
					if g.output != "table" {
						return printData(out, g.output, w)
					}
					printByKind(out, []computeapi.Workload{*w}, time.Now()) // kinds_view.go
					if kind == kindApp {
						eps, err := c.Endpoints(ctx, project, w.Metadata.Name)
						describeServing(out, *w, eps, err) // serving_view.go
					}
					return nil
				}
				ws, err := c.ListAll(ctx, project, computeapi.ListWorkloadsParams{Kind: kind, Label: selector, Phase: phaseFilter})
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(out, g.output, computeapi.WorkloadList{Items: ws})
				}
				if len(ws) == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "no workloads in project %s\n", project)
					return nil
				}
				printByKind(out, ws, time.Now()) // kinds_view.go: a table per kind
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only workloads with these labels (k=v,k2=v2)")
	cmd.Flags().StringVar(&phaseFilter, "phase", "", "only workloads in this phase (Pending, Running, ...)")
	return cmd
}

// onWorkload checks KIND NAME, and that the command applies to the kind
// (applies, when not nil), and runs fn on them in the project.
func (g *globals) onWorkload(stream bool, applies func(kindInfo) error, fn func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		k, err := lookupKind(args[0])
		if err != nil {
			return err
		}
		if applies != nil {
			if err := applies(k); err != nil {
				return fmt.Errorf("%s %s: %w", cmd.Name(), ref(k.Name, args[1]), err)
			}
		}
		kind := k.Name
		return g.run(stream, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			err = fn(ctx, cmd, c, project, kind, args[1])
			var apiErr *sdk.Error
			if errors.As(err, &apiErr) {
				// Say which workload the gateway refused or did not find.
				return fmt.Errorf("%s %s in project %s: %w", cmd.Name(), ref(kind, args[1]), project, err)
			}
			return err
		})(cmd, args)
	}
}

func describeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe KIND NAME",
		Short: "Show a workload in detail: status per zone and cluster, conditions, why pending, events",
		Long: `describe shows a workload's metadata, phase and pods, ready pods per zone and
per member cluster, conditions, why it cannot be placed (per cluster and
filter), the latest Kubernetes events of its objects, and its recent
platform events (admitted, scheduled, propagated, running, ...). A CronJob
shows its cluster, schedule and runs; a Daemon its DaemonSets per cluster
and which are behind; an App its ports, region-wide address, endpoints per
zone, external exposure (host and the Ingresses' addresses) and
zone-by-zone rollout.`,
		Example: `  atoll describe app web
  atoll describe pod notebook -p demo -o json`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(false, nil, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			w, err := c.Get(ctx, project, kind, name)
			if err != nil {
				return err
			}
			events, evErr := c.ListEvents(ctx, project, kind, name, 0)
			var (
				history []computeapi.ScalerDecision
				hErr    error
			)
			if kind == kindScaler {
				history, hErr = c.ScalerHistory(ctx, project, name)
			}
			var (
				ro     *computeapi.Rollout
				roErr  error
				eps    *computeapi.Endpoints
				epsErr error
			)
			if kind == kindApp {
				ro, roErr = c.Rollout(ctx, project, name)     // kinds_describe.go
				eps, epsErr = c.Endpoints(ctx, project, name) // serving_view.go
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, struct {
					Workload  *computeapi.Workload        `json:"workload"`
					Events    []computeapi.Event          `json:"events"`
					Decisions []computeapi.ScalerDecision `json:"decisions,omitempty"`
					Rollout   *computeapi.Rollout         `json:"rollout,omitempty"`
					Endpoints *computeapi.Endpoints       `json:"endpoints,omitempty"`
				}{w, events, history, ro, eps})
			}
			describeWorkload(cmd.OutOrStdout(), *w, events, evErr, time.Now())
			if kind == kindScaler {
				describeScaler(cmd.OutOrStdout(), history, hErr, time.Now())
			}
			if kind == kindApp {
				describeServing(cmd.OutOrStdout(), *w, eps, epsErr)
				describeRollout(cmd.OutOrStdout(), *w, ro, roErr, time.Now())
			}
			return nil
		}),
	}
}

func deleteCmd(g *globals) *cobra.Command {
	var (
		files                 []string
		ignoreNotFound, force bool
	)
	cmd := &cobra.Command{
		Use:   "delete (KIND NAME | -f FILE)",
		Short: "Delete workloads: their objects leave every member cluster",
		Long: `delete deletes one workload, or every workload named in files (as for
apply). Its objects are removed from every member cluster and its quota is
released.`,
		Example: `  atoll delete app web
  atoll delete -f deploy/examples/app.yaml --ignore-not-found`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(files) > 0 {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			type one struct{ project, kind, name string }
			var todo []one
			if len(files) == 0 {
				kind, err := kindName(args[0])
				if err != nil {
					return err
				}
				todo = append(todo, one{kind: kind, name: args[1]})
			} else {
				docs, err := readDocuments(cmd.InOrStdin(), files)
				if err != nil {
					return err
				}
				for i, raw := range docs {
					d, err := sdk.ParseDocument(raw)
					if err != nil {
						return fmt.Errorf("document %d: %w", i+1, err)
					}
					todo = append(todo, one{project: d.Project, kind: d.Kind, name: d.Name})
				}
			}
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				failed := 0
				for _, w := range todo {
					project := first(w.project, t.project)
					if project == "" {
						_, err := t.needProject()
						return err
					}
					del := c.Delete
					if force {
						del = c.ForceDelete
					}
					err := del(ctx, project, w.kind, w.name)
					switch {
					case err == nil:
						fmt.Fprintf(cmd.OutOrStdout(), "%s deleted\n", ref(w.kind, w.name))
					case ignoreNotFound && sdk.IsNotFound(err):
					case len(todo) == 1:
						return err
					default:
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: ", ref(w.kind, w.name))
						describeError(cmd.ErrOrStderr(), err, "  ")
						failed++
					}
				}
				if failed > 0 {
					return &ExitError{Code: 1}
				}
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "delete the workloads of this file (- for standard input, repeatable)")
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "a missing workload is not an error")
	cmd.Flags().BoolVar(&force, "force", false, "delete a Config or Secret even while workloads name it (they then show ConfigMissing)")
	return cmd
}

// printWorkload writes the outcome of an operation.
func (g *globals) printWorkload(out io.Writer, w *computeapi.Workload, what string) error {
	if g.output != "table" {
		return printData(out, g.output, w)
	}
	fmt.Fprintf(out, "%s %s (generation %d)\n", ref(w.Kind, w.Metadata.Name), what, w.Metadata.Generation)
	return nil
}

func scaleCmd(g *globals) *cobra.Command {
	var replicas int32
	cmd := &cobra.Command{
		Use:   "scale KIND NAME --replicas N",
		Short: "Set an App's replicas or a JobSet's parallelism",
		Long: `scale sets an App's replicas (split again across zones) or a JobSet's
parallelism. The quota of the new size is reserved first; a scale beyond
quota is refused and changes nothing. It applies to ` + kindList(kindsWhere(func(k kindInfo) bool { return slices.Contains(k.Ops, opScale) })) + `.`,
		Example: `  atoll scale app web --replicas 12`,
		Args:    cobra.ExactArgs(2),
		RunE: g.onWorkload(false, needOp(opScale), func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			if replicas < 0 {
				return fmt.Errorf("--replicas %d: want 0 or more", replicas)
			}
			w, err := c.Scale(ctx, project, kind, name, replicas)
			if err != nil {
				return err
			}
			return g.printWorkload(cmd.OutOrStdout(), w, fmt.Sprintf("scaled to %d", replicas))
		}),
	}
	cmd.Flags().Int32Var(&replicas, "replicas", 0, "the new number of replicas")
	_ = cmd.MarkFlagRequired("replicas")
	return cmd
}

func restartCmd(g *globals) *cobra.Command {
	var container string
	cmd := &cobra.Command{
		Use:   "restart KIND NAME [--container C]",
		Short: "Restart a workload (rolling); --container says which container asked",
		Long: `restart rolls a workload's pods over, zone by zone. With --container C the
pods that run container C are replaced, not restarted in place: Kubernetes
cannot restart one container of a running pod. An App's pods are replaced
rolling, zone by zone, within its availability budget; a Daemon's rolling
too; a Pod is deleted and created again; a JobSet's, TrainingJob's or
CronJob's running Jobs are replaced. The workload records which container
asked and when. It applies to
` + kindList(kindsWhere(func(k kindInfo) bool { return slices.Contains(k.Ops, opRestart) })) + `.`,
		Example: `  atoll restart app web
  atoll restart app web --container sidecar`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(false, func(k kindInfo) error {
			if container != "" {
				return needOp(opRestartContainer)(k)
			}
			return needOp(opRestart)(k)
		}, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			var (
				w   *computeapi.Workload
				err error
			)
			what := "restarted"
			if container != "" {
				w, err = c.RestartContainer(ctx, project, kind, name, container)
				what = "container " + container + " restarted"
			} else {
				w, err = c.Operate(ctx, project, kind, name, sdk.Restart)
			}
			if err != nil {
				return err
			}
			return g.printWorkload(cmd.OutOrStdout(), w, what)
		}),
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "the container that asked: its pods are replaced")
	return cmd
}

var operationHelp = map[sdk.Operation]struct{ short, long, done string }{
	sdk.Pause:  {"Pause a workload: an App's replicas held at zero, a JobSet's jobs suspended", "pause holds an App's replicas at zero and suspends a JobSet's jobs; the\nworkload, its placement and its quota stay. resume undoes it.", "paused"},
	sdk.Resume: {"Resume a paused workload", "resume undoes pause: the App gets its replicas back, the JobSet's jobs go on.", "resumed"},
	sdk.Stop:   {"Stop a workload: every object removed and its quota released, the workload kept", "stop removes every object of the workload from the member clusters and\nreleases its quota, keeping the workload itself. start undoes it.", "stopped"},
	sdk.Start:  {"Start a stopped workload", "start undoes stop: the workload is admitted against quota and placed again.", "started"},
}

func operateCmd(g *globals, op sdk.Operation) *cobra.Command {
	h := operationHelp[op]
	return &cobra.Command{
		Use:     string(op) + " KIND NAME",
		Short:   h.short,
		Long:    h.long + "\nIt applies to " + kindList(kindsWhere(func(k kindInfo) bool { return slices.Contains(k.Ops, string(op)) })) + ".",
		Example: fmt.Sprintf("  atoll %s app web -p demo", op),
		Args:    cobra.ExactArgs(2),
		RunE: g.onWorkload(false, needOp(string(op)), func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			w, err := c.Operate(ctx, project, kind, name, op)
			if err != nil {
				return err
			}
			return g.printWorkload(cmd.OutOrStdout(), w, h.done)
		}),
	}
}
