package cli

import (
	"fmt"
	"io"

	"atoll.dev/libs/computeapi"
)

// describePod writes a Pod's containers (type, image as running, restart
// count, readiness, state) and its volume.
func describePod(out io.Writer, w computeapi.Workload) {
	p := w.Status.Pod
	if w.Kind != kindPod || p.Cluster == "" {
		return
	}
	fmt.Fprintf(out, "\nPod:\n")
	tw := newTable(out)
	fmt.Fprintf(tw, "  Cluster:\t%s\n", p.Cluster)
	fmt.Fprintf(tw, "  UID:\t%s\n", orDash(p.Uid))
	if v := p.Volume; v.Claim != "" {
		fmt.Fprintf(tw, "  Volume:\t%s %s %s\n", v.Claim, orDash(v.Phase), v.Capacity)
	}
	tw.Flush()
	if len(p.Containers) == 0 {
		return
	}
	fmt.Fprintf(out, "\nContainers:\n")
	tw = newTable(out)
	fmt.Fprintf(tw, "  NAME\tTYPE\tIMAGE\tRESTARTS\tREADY\tSTATE\n")
	for _, c := range p.Containers {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%v\t%s\n", c.Name, c.Type, c.Image, c.RestartCount, c.Ready, orDash(c.State))
	}
	tw.Flush()
}
