package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"atoll.dev/libs/computeapi"
)

// What describe adds for a CronJob's spec, a Daemon's clusters and an
// App's zone-by-zone rollout: the same facts the console's cards show
// (services/gateway/console: the CronJob and Daemon cards and
// #rollout-card).

// cronSpecRows writes a CronJob's schedule, time zone, concurrency policy
// and starting deadline from its spec (the API carries specs as JSON).
func cronSpecRows(tw *tabwriter.Writer, spec json.RawMessage) {
	var s struct {
		Schedule                string `json:"schedule"`
		TimeZone                string `json:"timeZone"`
		ConcurrencyPolicy       string `json:"concurrencyPolicy"`
		StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds"`
	}
	if len(spec) == 0 || json.Unmarshal(spec, &s) != nil || s.Schedule == "" {
		return
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "UTC" // the member cluster's (CronJobSpec.TimeZone in libs/api)
	}
	fmt.Fprintf(tw, "  Schedule:\t%s (%s)\n", s.Schedule, tz)
	if s.ConcurrencyPolicy != "" {
		fmt.Fprintf(tw, "  Concurrency:\t%s\n", s.ConcurrencyPolicy)
	}
	if s.StartingDeadlineSeconds != nil {
		fmt.Fprintf(tw, "  Starting deadline:\t%ds\n", *s.StartingDeadlineSeconds)
	}
}

// daemonClusters is a Daemon's clusters, sorted: those with counts and
// those behind that have not reported counts yet.
func daemonClusters(d computeapi.DaemonStatus) []string {
	names := sortedKeys(d.Clusters)
	for _, b := range d.Behind {
		if _, ok := d.Clusters[b]; !ok {
			names = append(names, b)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// daemonState is "behind" for a cluster whose DaemonSet is not done.
func daemonState(d computeapi.DaemonStatus, cluster string) string {
	if slices.Contains(d.Behind, cluster) {
		return "behind"
	}
	return "up to date"
}

// describeRollout writes an App's zone-by-zone rollout: its phase, why it
// is paused or rolled back, the zones in rollout order with their state
// and times, the policy from the App's spec, and the last rollout
// operation. err is why the rollout could not be read.
func describeRollout(out io.Writer, w computeapi.Workload, ro *computeapi.Rollout, err error, now time.Time) {
	fmt.Fprintf(out, "\nRollout:\n")
	if err != nil {
		fmt.Fprintf(out, "  (unavailable: %v)\n", err)
		return
	}
	if ro == nil {
		ro = &computeapi.Rollout{Phase: computeapi.RolloutPhaseComplete}
	}
	var spec struct {
		Rollout *rolloutStrategy `json:"rollout"`
	}
	_ = json.Unmarshal(w.Spec, &spec) // a spec the API answered; the defaults otherwise
	ctl := w.Control.Rollout
	tw := newTable(out)
	fmt.Fprintf(tw, "  Phase:\t%s\n", ro.Phase)
	switch {
	case ctl.Paused && ro.Phase != computeapi.RolloutPhasePaused:
		fmt.Fprintf(tw, "  Paused:\tpause requested at %s, not yet held by the rollout controller\n", ctl.At.Local().Format(time.RFC3339))
	case ro.Phase == computeapi.RolloutPhasePaused:
		fmt.Fprintf(tw, "  Paused:\t%s\n", orDash(ro.Message))
	case ro.Message != "":
		fmt.Fprintf(tw, "  Message:\t%s\n", ro.Message)
	}
	zones := make([]string, 0, len(ro.Zones))
	for _, z := range ro.Zones {
		zones = append(zones, z.Zone)
	}
	fmt.Fprintf(tw, "  Zone order:\t%s\n", orDash(strings.Join(zones, " → ")))
	fmt.Fprintf(tw, "  Stable:\t%s\n", orDash(ro.Stable))
	if ro.Target != "" {
		fmt.Fprintf(tw, "  Rolling out:\t%s\n", ro.Target)
	}
	if ro.Abandoned != "" {
		fmt.Fprintf(tw, "  Abandoned:\t%s\n", ro.Abandoned)
	}
	fmt.Fprintf(tw, "  Policy:\ton failure %s, bake %s, deadline %s per zone\n",
		spec.Rollout.Policy(), spec.Rollout.Bake(), spec.Rollout.Deadline())
	describeUpdateStrategy(tw, w) // inplace_view.go
	if ctl.Op != "" {
		fmt.Fprintf(tw, "  Last operation:\t%s at %s (%s ago)\n", ctl.Op, ctl.At.Local().Format(time.RFC3339), age(ctl.At, now))
	}
	tw.Flush()
	describeRevisions(out, w) // inplace_view.go
	if len(ro.Zones) == 0 {
		return
	}
	tw = newTable(out)
	fmt.Fprintf(tw, "  STEP\tZONE\tSTATE\tREVISION\tSTARTED\tAVAILABLE SINCE\tFINISHED\tMESSAGE\n")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.TimeOnly) + " (" + age(t, now) + " ago)"
	}
	for i, z := range ro.Zones {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, z.Zone, z.State, orDash(z.Revision),
			at(z.Started), at(z.AvailableSince), at(z.Finished), orDash(z.Message))
	}
	tw.Flush()
}

// rolloutStrategy is an App's spec.rollout, the fields describe shows
// (libs/api RolloutStrategy; TestRolloutDefaults checks the defaults).
type rolloutStrategy struct {
	BakeSeconds     *int32 `json:"bakeSeconds,omitempty"`
	DeadlineSeconds *int32 `json:"deadlineSeconds,omitempty"`
	OnFailure       string `json:"onFailure,omitempty"`
}

// The defaults of an App's rollout.
const (
	defaultRolloutBake     = 10 * time.Second
	defaultRolloutDeadline = 10 * time.Minute
	defaultRolloutPolicy   = "Pause"
)

// Bake returns the bake time of each zone.
func (s *rolloutStrategy) Bake() time.Duration {
	if s == nil || s.BakeSeconds == nil {
		return defaultRolloutBake
	}
	return time.Duration(*s.BakeSeconds) * time.Second
}

// Deadline returns the per-zone deadline.
func (s *rolloutStrategy) Deadline() time.Duration {
	if s == nil || s.DeadlineSeconds == nil {
		return defaultRolloutDeadline
	}
	return time.Duration(*s.DeadlineSeconds) * time.Second
}

// Policy returns what a failed zone does: Pause, RollbackZone or
// RollbackAll.
func (s *rolloutStrategy) Policy() string {
	if s == nil || s.OnFailure == "" {
		return defaultRolloutPolicy
	}
	return s.OnFailure
}
