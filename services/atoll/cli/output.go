package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/util/duration"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"atoll.dev/libs/computeapi"
)

// ref is how the CLI names a workload: kind/name in lower case kind.
func ref(kind, name string) string { return strings.ToLower(kind) + "/" + name }

// printData writes v as JSON or YAML.
func printData(out io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
}

// age is how long ago t was, as kubectl prints an AGE column.
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05")
}

// phase of a workload, Pending before any status.
func phase(w computeapi.Workload) string {
	p := w.Status.Phase
	if p == "" {
		p = "Pending"
	}
	switch {
	case w.Control.Stopped:
		p += " (stopped)"
	case w.Control.Paused:
		p += " (paused)"
	}
	return p
}

// zonesLine is "a:3/3 b:3/3": ready over desired per zone.
func zonesLine(zones map[string]computeapi.Counts) string {
	if len(zones) == 0 {
		return "-"
	}
	var parts []string
	for _, z := range sortedKeys(zones) {
		c := zones[z]
		parts = append(parts, fmt.Sprintf("%s:%d/%d", z, c.Ready, c.Desired))
	}
	return strings.Join(parts, " ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func labelsLine(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range sortedKeys(l) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// printWorkloads writes the table of get.
func printWorkloads(out io.Writer, ws []computeapi.Workload, now time.Time) {
	tw := newTable(out)
	defer tw.Flush()
	fmt.Fprintln(tw, "KIND\tNAME\tPHASE\tREADY\tZONES\tGEN\tAGE")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", w.Kind, w.Metadata.Name, phase(w),
			readyColumn(w, now), zonesLine(w.Status.Zones), w.Metadata.Generation, age(w.Metadata.Created, now)) // kinds_view.go
	}
}

// describeWorkload writes everything a person asks about one workload.
func describeWorkload(out io.Writer, w computeapi.Workload, events []computeapi.Event, eventsErr error, now time.Time) {
	tw := newTable(out)
	st := w.Status
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Name", w.Metadata.Name)
	row("Project", w.Metadata.Project)
	row("Kind", w.Kind)
	row("UID", orDash(w.Metadata.Uid))
	row("Labels", labelsLine(w.Metadata.Labels))
	if !w.Metadata.Created.IsZero() {
		row("Created", fmt.Sprintf("%s (%s ago)", w.Metadata.Created.Local().Format(time.RFC3339), age(w.Metadata.Created, now)))
	}
	row("Generation", fmt.Sprintf("%d (observed %d)", w.Metadata.Generation, st.ObservedGeneration))
	row("Phase", phase(w))
	queueRows(row, st) // tiers_view.go
	if infoOf(w.Kind).Pods {
		row("Pods", fmt.Sprintf("%d desired, %d ready, %d running, %d succeeded, %d failed", st.Desired, st.Ready, st.Running, st.Succeeded, st.Failed))
	}
	if len(st.Images) > 0 {
		row("Images", strings.Join(st.Images, ", "))
	}
	if c := w.Control; c.Paused || c.Stopped || !c.RestartedAt.IsZero() || len(c.ContainerRestarts) > 0 {
		var parts []string
		if c.Paused {
			parts = append(parts, "paused")
		}
		if c.Stopped {
			parts = append(parts, "stopped")
		}
		if !c.RestartedAt.IsZero() {
			parts = append(parts, "restarted at "+c.RestartedAt.Local().Format(time.RFC3339))
		}
		for _, name := range sortedKeys(c.ContainerRestarts) {
			parts = append(parts, fmt.Sprintf("container %s restarted at %s", name, c.ContainerRestarts[name].Local().Format(time.RFC3339)))
		}
		row("Control", strings.Join(parts, "; "))
	}
	tw.Flush()

	counts := func(title, col string, m map[string]computeapi.Counts) {
		if len(m) == 0 {
			return
		}
		fmt.Fprintf(out, "\n%s:\n", title)
		tw := newTable(out)
		fmt.Fprintf(tw, "  %s\tDESIRED\tREADY\tRUNNING\tSUCCEEDED\tFAILED\n", col)
		for _, k := range sortedKeys(m) {
			c := m[k]
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\n", k, c.Desired, c.Ready, c.Running, c.Succeeded, c.Failed)
		}
		tw.Flush()
	}
	if infoOf(w.Kind).Pods {
		counts("Zones", "ZONE", st.Zones)
		counts("Clusters", "CLUSTER", st.Clusters)
		describeConfigVersions(out, w) // config_view.go
	}
	describeKind(out, w, now) // kinds_view.go
	describePod(out, w)       // pod_view.go

	if len(st.Conditions) > 0 {
		fmt.Fprintf(out, "\nConditions:\n")
		tw := newTable(out)
		fmt.Fprintf(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE\n")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%v\t%s\t%s\n", c.Type, c.Status, orDash(c.Reason), c.Message)
		}
		tw.Flush()
	}
	if len(st.Reasons) > 0 {
		fmt.Fprintf(out, "\nWhy not placed:\n")
		tw := newTable(out)
		fmt.Fprintf(tw, "  CLUSTER\tFILTER\tREASON\n")
		for _, r := range st.Reasons {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", orDash(r.Cluster), r.Filter, r.Reason)
		}
		tw.Flush()
	}
	if len(st.Events) > 0 {
		fmt.Fprintf(out, "\nKubernetes events:\n")
		tw := newTable(out)
		fmt.Fprintf(tw, "  TIME\tCLUSTER\tOBJECT\tTYPE\tREASON\tMESSAGE\n")
		for _, e := range st.Events {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", clock(e.Time), orDash(e.Cluster), orDash(e.Object), orDash(e.Type), orDash(e.Reason), e.Message)
		}
		tw.Flush()
	}
	fmt.Fprintf(out, "\nEvents:\n")
	switch {
	case eventsErr != nil:
		fmt.Fprintf(out, "  (cannot list events: %v)\n", eventsErr)
	case len(events) == 0:
		fmt.Fprintf(out, "  (none)\n")
	default:
		const recent = 20
		if len(events) > recent {
			fmt.Fprintf(out, "  (the last %d of %d)\n", recent, len(events))
			events = events[len(events)-recent:]
		}
		tw := newTable(out)
		fmt.Fprintf(tw, "  ID\tTIME\tEVENT\tGEN\tMESSAGE\n")
		for _, e := range events {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\n", e.Id, clock(e.Time), e.Event, e.Generation, e.Message)
		}
		tw.Flush()
	}
}

// eventLine is one event of `events -w`, in fixed columns.
func eventLine(e computeapi.Event) string {
	return fmt.Sprintf("%-8d %-8s %-12s %-4d %s", e.Id, clock(e.Time), e.Event, e.Generation, e.Message)
}

const eventHeader = "ID       TIME     EVENT        GEN  MESSAGE"

// printQuota writes used/cap per tier (a tier on the region's default
// marked so), the workloads over their cap, then what Preemptible
// borrows. Every cap is finite; 0 forbids.
func printQuota(out io.Writer, q computeapi.Quota) {
	tw := newTable(out)
	fmt.Fprintf(tw, "TIER\tCPU\tMEMORY\tSTORAGE\tGPUS\tPODS\tLIMITS\n")
	for _, t := range q.Tiers {
		src := "own"
		if t.Default {
			src = "default"
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s/%s\t%s/%s\t%d/%d\t%d/%d\t%s\n", t.Tier,
			cpu(t.Used.MilliCPU), cpu(t.Limit.MilliCPU),
			mem(t.Used.MemoryBytes), mem(t.Limit.MemoryBytes),
			mem(t.Used.StorageBytes), mem(t.Limit.StorageBytes),
			t.Used.Gpus, t.Limit.Gpus,
			t.Used.Pods, t.Limit.Pods, src)
	}
	tw.Flush()
	if q.MaxWorkloads > 0 {
		fmt.Fprintf(out, "Workloads: %d of at most %d\n", q.Workloads, q.MaxWorkloads)
	}
	printBorrowed(out, q) // tiers_view.go
}

// cpu formats millicores as cores when whole.
func cpu(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprint(m / 1000)
	}
	return fmt.Sprintf("%dm", m)
}

// mem formats bytes in the largest binary unit that divides them.
func mem(b int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "Ti"}, {30, "Gi"}, {20, "Mi"}, {10, "Ki"}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", b>>u.shift, u.name)
		}
	}
	return fmt.Sprint(b)
}

// clusterTotals adds up a cluster's pools.
func clusterTotals(c computeapi.Cluster) (nodes, ready int, alloc, req computeapi.Resources) {
	for _, p := range c.Pools {
		nodes += p.Nodes
		ready += p.ReadyNodes
		alloc.MilliCPU += p.Allocatable.MilliCPU
		req.MilliCPU += p.Requested.MilliCPU
		alloc.MemoryBytes += p.Allocatable.MemoryBytes
		req.MemoryBytes += p.Requested.MemoryBytes
		alloc.Gpus += p.Allocatable.Gpus
		req.Gpus += p.Requested.Gpus
		alloc.Pods += p.Allocatable.Pods
		req.Pods += p.Requested.Pods
	}
	return
}

func printClusters(out io.Writer, cs []computeapi.Cluster) {
	tw := newTable(out)
	defer tw.Flush()
	fmt.Fprintf(tw, "NAME\tZONE\tHEALTHY\tCORDONED\tNODES\tCPU REQ/ALLOC\tPODS\tGPUS\tBUFFER\tLABELS\n")
	for _, c := range cs {
		nodes, ready, alloc, req := clusterTotals(c)
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d/%d\t%s/%s\t%d/%d\t%d/%d\t%s\t%s\n", c.Name, c.Zone, c.Healthy, c.Cordoned,
			ready, nodes, cpu(req.MilliCPU), cpu(alloc.MilliCPU), req.Pods, alloc.Pods, req.Gpus, alloc.Gpus, bufferOf(c), labelsLine(c.Labels))
	}
}

func describeCluster(out io.Writer, c computeapi.Cluster, now time.Time) {
	tw := newTable(out)
	fmt.Fprintf(tw, "Name:\t%s\nZone:\t%s\nHealthy:\t%v\nCordoned:\t%v\nLabels:\t%s\n", c.Name, c.Zone, c.Healthy, c.Cordoned, labelsLine(c.Labels))
	if b := bufferOf(c); b != "-" {
		fmt.Fprintf(tw, "Burst buffer:\t%s of each pool kept free of OnDemand and Preemptible work (Reserved may use it)\n", b)
	}
	if c.Message != "" {
		fmt.Fprintf(tw, "Message:\t%s\n", c.Message)
	}
	if !c.LastSeen.IsZero() {
		fmt.Fprintf(tw, "Last seen:\t%s ago\n", age(c.LastSeen, now))
	}
	tw.Flush()
	if len(c.Pools) == 0 {
		return
	}
	fmt.Fprintf(out, "\nPools:\n")
	tw = newTable(out)
	fmt.Fprintf(tw, "  POOL\tTIER\tNODES\tCPU REQ/ALLOC\tMEMORY REQ/ALLOC\tPODS\tGPUS\tGPU TYPE\n")
	for _, name := range sortedKeys(c.Pools) {
		p := c.Pools[name]
		fmt.Fprintf(tw, "  %s\t%s\t%d/%d\t%s/%s\t%s/%s\t%d/%d\t%d/%d\t%s\n", name, orDash(p.Tier), p.ReadyNodes, p.Nodes,
			cpu(p.Requested.MilliCPU), cpu(p.Allocatable.MilliCPU), mem(p.Requested.MemoryBytes), mem(p.Allocatable.MemoryBytes),
			p.Requested.Pods, p.Allocatable.Pods, p.Requested.Gpus, p.Allocatable.Gpus, orDash(p.GpuType))
	}
	tw.Flush()
}

// bufferOf is the cluster's burst buffer as its label sets it (the
// labelBufferPercent is the member-cluster label of its burst buffer
// (libs/api LabelBufferPercent).
const labelBufferPercent = "scheduling.atoll.dev/buffer-percent"

// scheduler's default applies without one: "-").
func bufferOf(c computeapi.Cluster) string {
	v, ok := c.Labels[labelBufferPercent]
	if !ok {
		return "-"
	}
	return strings.TrimSuffix(v, "%") + "%"
}
