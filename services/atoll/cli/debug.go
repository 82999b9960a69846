package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// quiet turns the end of a stream by Ctrl-C into success.
func quiet(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

func logsCmd(g *globals) *cobra.Command {
	var (
		follow    bool
		container string
		since     time.Duration
		tail      int64
		prefix    bool
		file      string
		zone, pod string
	)
	cmd := &cobra.Command{
		Use:   "logs KIND NAME [-f] [--container C] [--zone Z] [--pod P] [--since D] [--tail N] [--file PATH]",
		Short: "Print the logs of a workload's pods, across clusters",
		Long: `logs prints the log lines of every pod of a workload, whichever member
cluster runs it, each prefixed with its cluster, pod and container
(--prefix=false drops it). -f follows new lines until Ctrl-C. -o json prints
one JSON object per line. --file follows a file inside the container (the
named one, else each pod's first main container) instead of its output, in
every Running pod (developer role; not with --since). A session reads at most
the region's limit of containers (50 by default): narrow a larger workload
with --container, --zone or --pod. It applies to the kinds
with pods: ` + kindList(kindsWhere(func(k kindInfo) bool { return k.Pods })) + `.`,
		Example: `  atoll logs app web --tail 20
  atoll logs app web -f --container web --since 10m
  atoll logs app web --file /var/log/app.log -f`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(true, needPods, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			if since < 0 || tail < 0 {
				return errors.New("--since and --tail take values of 0 or more")
			}
			if !follow {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, g.timeout)
				defer cancel()
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			q := computeapi.StreamLogsParams{Container: container, Zone: zone, Pod: pod, Follow: follow, SinceSeconds: int64(since / time.Second), Tail: tail, File: file}
			err := c.Logs(ctx, project, kind, name, q, func(l computeapi.LogLine) error {
				switch {
				case g.output != "table":
					return enc.Encode(l)
				case prefix:
					_, err := fmt.Fprintf(out, "[%s/%s/%s] %s\n", l.Cluster, l.Pod, l.Container, l.Line)
					return err
				default:
					_, err := fmt.Fprintln(out, l.Line)
					return err
				}
			})
			return quiet(ctx, err)
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	f.StringVarP(&container, "container", "c", "", "only this container")
	f.StringVar(&zone, "zone", "", "only the pods in this zone")
	f.StringVar(&pod, "pod", "", "only this pod")
	f.DurationVar(&since, "since", 0, "only lines newer than this (5s, 2m, 3h)")
	f.Int64Var(&tail, "tail", 0, "only the last N lines of each container (0: all)")
	f.BoolVar(&prefix, "prefix", true, "prefix each line with [cluster/pod/container]")
	f.StringVar(&file, "file", "", "follow this file (an absolute path) inside the container instead of its output")
	return cmd
}

func execCmd(g *globals) *cobra.Command {
	var (
		stdin, tty     bool
		container, pod string
	)
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] KIND NAME [--container C] [--pod P] -- COMMAND [ARG...]",
		Short: "Run a command in a container of a workload",
		Long: `exec runs a command in a container of one of a workload's pods (the first
running one, or --pod) and exits with the command's exit code. -i passes
standard input; -t allocates a terminal, puts yours in raw mode and follows
its size. It applies to the kinds with pods:
` + kindList(kindsWhere(func(k kindInfo) bool { return k.Pods })) + `.`,
		Example: `  atoll exec app web -- cat /etc/hostname
  atoll exec -it app web --container web -- sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 2 || len(args) < 3 {
				return errors.New("want KIND NAME -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: g.onWorkload(true, needPods, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			command := cmd.Flags().Args()[2:]
			var in io.Reader
			if stdin {
				in = cmd.InOrStdin()
			}
			fd := int(os.Stdin.Fd())
			if tty && stdin && !term.IsTerminal(fd) {
				// As kubectl: an interactive terminal needs standard input to be one.
				fmt.Fprintln(cmd.ErrOrStderr(), "standard input is not a terminal; running without -t")
				tty = false
			}
			var resize chan sdk.TerminalSize
			if tty {
				sizeFd := int(os.Stdout.Fd())
				if stdin {
					// Keys go to the command as typed: Ctrl-C included.
					old, err := term.MakeRaw(fd)
					if err != nil {
						return fmt.Errorf("raw terminal: %w", err)
					}
					defer func() { _ = term.Restore(fd, old) }() // nothing to do if the terminal cannot be restored
					sizeFd = fd
				}
				if term.IsTerminal(sizeFd) {
					resize = make(chan sdk.TerminalSize, 1)
					stop := watchResize(sizeFd, resize)
					defer stop()
				}
			}
			code, err := c.Exec(ctx, project, kind, name,
				computeapi.ExecShellParams{Command: command, Container: container, Pod: pod, Tty: tty},
				in, cmd.OutOrStdout(), cmd.ErrOrStderr(), resize)
			if err != nil {
				return quiet(ctx, err)
			}
			if code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&stdin, "stdin", "i", false, "pass standard input to the command")
	f.BoolVarP(&tty, "tty", "t", false, "allocate a terminal (standard input must be one)")
	f.StringVarP(&container, "container", "c", "", "the container (default: the first)")
	f.StringVar(&pod, "pod", "", "the pod (default: the first running one)")
	return cmd
}

// sendSize sends fd's terminal size, replacing one not yet sent.
func sendSize(fd int, ch chan sdk.TerminalSize) {
	w, h, err := term.GetSize(fd)
	if err != nil {
		return
	}
	s := sdk.TerminalSize{Width: uint16(w), Height: uint16(h)}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- s:
	default:
	}
}

func eventsCmd(g *globals) *cobra.Command {
	var (
		watch bool
		after int64
	)
	cmd := &cobra.Command{
		Use:   "events KIND NAME [-w]",
		Short: "List a workload's events (admitted, scheduled, propagated, running, ...), or watch them",
		Long: `events lists the events the platform retained for a workload, in order:
admitted, scheduled, propagated, running, scaled, paused, failed, ... With -w
it then keeps printing new ones as they happen, until Ctrl-C, resuming
after a dropped connection without losing or repeating any. --after N
starts after event id N. -o json prints one JSON object per event when
watching.`,
		Example: `  atoll events app web
  atoll events app web -w`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(true, nil, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, kind, name string) error {
			out := cmd.OutOrStdout()
			if !watch {
				ctx, cancel := context.WithTimeout(ctx, g.timeout)
				defer cancel()
				evs, err := c.ListEvents(ctx, project, kind, name, after)
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(out, g.output, computeapi.EventList{Items: evs})
				}
				fmt.Fprintln(out, eventHeader)
				for _, e := range evs {
					fmt.Fprintln(out, eventLine(e))
				}
				return nil
			}
			if g.output == "table" {
				fmt.Fprintln(out, eventHeader)
			}
			enc := json.NewEncoder(out)
			err := c.WatchEvents(ctx, project, kind, name, after, func(e computeapi.Event) error {
				switch g.output {
				case "json":
					return enc.Encode(e)
				case "yaml":
					fmt.Fprintln(out, "---")
					return printData(out, "yaml", e)
				}
				_, err := fmt.Fprintln(out, eventLine(e))
				return err
			})
			return quiet(ctx, err)
		}),
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep printing new events")
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this id")
	cmd.AddCommand(eventCredsCmd(g))
	return cmd
}
