package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// endpointsCmd is `atoll endpoints app NAME`: an App's address, ports and
// endpoints per zone and cluster.
func endpointsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "endpoints KIND NAME",
		Short: "An App's region-wide address and its endpoints per zone and cluster",
		Long: `An App with named container ports is a Service named as the App in every
member cluster it runs in (NAME.atoll-PROJECT.svc.cluster.local), which also
reaches the ready pods of the other clusters; clients prefer their own zone.
endpoints lists every pod with an address, ready or not: only ready ones
receive traffic.`,
		Example: `  atoll endpoints app web
  atoll endpoints app web -o json`,
		Args: cobra.ExactArgs(2),
		RunE: g.onWorkload(false, func(k kindInfo) error {
			if k.Name != kindApp {
				return errors.New("only an App has endpoints")
			}
			return nil
		}, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, project, _, name string) error {
			eps, err := c.Endpoints(ctx, project, name)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, eps)
			}
			printEndpoints(cmd.OutOrStdout(), eps)
			return nil
		}),
	}
}

// printEndpoints writes the address and ports, then a table of the
// endpoints sorted by zone, cluster and pod.
func printEndpoints(w io.Writer, eps *computeapi.Endpoints) {
	if eps.Address == "" {
		fmt.Fprintln(w, "Address:  none (no named container port)")
	} else {
		var ports []string
		for _, p := range eps.Ports {
			s := fmt.Sprintf("%s %d/%s", p.Name, p.Port, p.Protocol)
			if p.AppProtocol != "" {
				s += " (" + p.AppProtocol + ")"
			}
			ports = append(ports, s)
		}
		fmt.Fprintf(w, "Address:  %s\nPorts:    %s\n", eps.Address, strings.Join(ports, ", "))
	}
	if len(eps.Endpoints) == 0 {
		fmt.Fprintln(w, "No endpoints.")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tCLUSTER\tPOD\tADDRESS\tREADY\tNODE")
	for _, e := range eps.Endpoints {
		ready := "no"
		if e.Ready {
			ready = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Zone, e.Cluster, e.Pod, e.Ip, ready, e.Node)
	}
	_ = tw.Flush()
}
