package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// capabilities is what the CLI's table and libs/api's registration both
// say of a kind.
type capabilities struct {
	Placed, Pods, AdminOnly, EveryCluster bool
	// Ops are sorted.
	Ops []string
}

// TestKindsMatchAPI fails when a kind libs/api registers is missing from
// the CLI's table (or the table has one the API does not), or when the
// two disagree on what applies to it. libs/api is a test-only import: the
// atoll binary does not link it.
func TestKindsMatchAPI(t *testing.T) {
	fromAPI := map[string]capabilities{}
	for _, k := range api.Kinds() {
		fromAPI[k.Name] = capabilities{Placed: api.Placed(k.Name), Pods: !k.NoPods, AdminOnly: k.AdminOnly, EveryCluster: k.EveryCluster, Ops: slices.Sorted(slices.Values(k.Ops))}
	}
	fromCLI := map[string]capabilities{}
	for _, k := range kinds {
		fromCLI[k.Name] = capabilities{Placed: k.Placed, Pods: k.Pods, AdminOnly: k.AdminOnly, EveryCluster: k.EveryCluster, Ops: slices.Sorted(slices.Values(k.Ops))}
	}
	if diff := cmp.Diff(fromAPI, fromCLI, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("kinds (-libs/api +CLI table):\n%s", diff)
	}
	for _, k := range kinds {
		for _, op := range k.Ops {
			if !slices.Contains(api.Ops, op) {
				t.Errorf("%s: operation %q is not one of libs/api Ops %v", k.Name, op, api.Ops)
			}
		}
		if !k.Pods && (slices.Contains(k.Ops, opRestart) || slices.Contains(k.Ops, opScale)) {
			t.Errorf("%s runs no pods but lists restart or scale", k.Name)
		}
	}
}

// TestKindTableSelfConsistent: every word resolves to one kind only, and
// the API's words resolve to their kind.
func TestKindTableSelfConsistent(t *testing.T) {
	seen := map[string]string{}
	for _, k := range kinds {
		for _, w := range append([]string{strings.ToLower(k.Name)}, k.Aliases...) {
			if other, ok := seen[w]; ok {
				t.Errorf("%q names both %s and %s", w, other, k.Name)
			}
			seen[w] = k.Name
		}
	}
	for _, name := range api.KindNames() {
		for _, typed := range []string{name, strings.ToUpper(name), strings.ToLower(name) + "s"} {
			if got, err := kindName(typed); err != nil || got != name {
				t.Errorf("kindName(%q) = %q, %v; want %s", typed, got, err, name)
			}
		}
	}
}

// TestRolloutDefaults: describe shows libs/api's defaults of a rollout.
func TestRolloutDefaults(t *testing.T) {
	var cli *rolloutStrategy
	var a *api.RolloutStrategy
	if cli.Bake() != a.Bake() || cli.Deadline() != a.Deadline() || cli.Policy() != a.Policy() {
		t.Errorf("CLI defaults %v %v %s, libs/api %v %v %s", cli.Bake(), cli.Deadline(), cli.Policy(), a.Bake(), a.Deadline(), a.Policy())
	}
}

// TestHelpListsKinds: the help texts that name the kinds name every kind
// of the table, so a new kind cannot leave them stale.
func TestHelpListsKinds(t *testing.T) {
	root := Root()
	withPods := kindsWhere(func(k kindInfo) bool { return k.Pods })
	tests := []struct {
		cmd  string
		want []string
	}{
		{"get", api.KindNames()},
		{"logs", withPods},
		{"exec", withPods},
		{"stop", kindsWhere(func(k kindInfo) bool { return slices.Contains(k.Ops, opStop) })},
	}
	for _, tt := range tests {
		c, _, err := root.Find([]string{tt.cmd})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tt.want {
			if !strings.Contains(c.Long, name) {
				t.Errorf("%s's help does not name %s:\n%s", tt.cmd, name, c.Long)
			}
		}
	}
	if c, _, _ := root.Find([]string{"logs"}); strings.Contains(c.Long, kindScaler) {
		t.Errorf("logs' help names a Scaler, which has no pods:\n%s", c.Long)
	}
}

// TestCommandsRefuseWhatDoesNotApply: logs and exec of a kind without
// pods, and operations a kind has not, are refused before any request,
// naming the kinds they apply to.
func TestCommandsRefuseWhatDoesNotApply(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	base := []string{"--server", url, "--token", "good", "-p", "demo"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"logs", "scaler", "web"}, "logs scaler/web: a Scaler runs no pods: no logs or exec"},
		{[]string{"exec", "scalers", "web", "--", "ls"}, "exec scaler/web: a Scaler runs no pods"},
		{[]string{"scale", "pod", "notebook", "--replicas", "2"}, "scale does not apply to a Pod (it applies to App or JobSet)"},
		{[]string{"pause", "pod", "notebook"}, "pause does not apply to a Pod"},
		{[]string{"restart", "scaler", "web"}, "restart does not apply to a Scaler"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, "", append(tt.args, base...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	if len(f.auth) != 0 {
		t.Errorf("%d requests sent for refused commands", len(f.auth))
	}
}

// TestGetAllByKind: `atoll get` with no kind prints a table per kind, in
// the table's order, each with the columns that apply: no pods columns
// for a Scaler; a kind this CLI does not know comes last, by name.
func TestGetAllByKind(t *testing.T) {
	created := time.Now().Add(-time.Hour)
	w := func(kind, name string) computeapi.Workload {
		return computeapi.Workload{Kind: kind, Metadata: computeapi.Metadata{Project: "demo", Name: name, Generation: 1, Created: created},
			Status: computeapi.WorkloadStatus{Phase: "Running", Desired: 2, Ready: 2}}
	}
	cliEnv(t)
	f, url := newFake(t)
	f.workloads = []computeapi.Workload{w("Scaler", "web"), w("Widget", "w1"), w("App", "web"), w("Pod", "nb"), w("App", "api")}
	out, _, err := runCLI(t, "", "get", "--server", url, "--token", "good", "-p", "demo")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		got = append(got, strings.Fields(l))
	}
	want := [][]string{
		{"KIND", "NAME", "PHASE", "READY", "ZONES", "GEN", "AGE"},
		{"App", "web", "Running", "2/2", "-", "1", "60m"},
		{"App", "api", "Running", "2/2", "-", "1", "60m"},
		{},
		{"KIND", "NAME", "PHASE", "READY", "ZONES", "GEN", "AGE"},
		{"Pod", "nb", "Running", "2/2", "-", "1", "60m"},
		{},
		{"KIND", "NAME", "PHASE", "GEN", "AGE"},
		{"Scaler", "web", "Running", "1", "60m"},
		{},
		{"KIND", "NAME", "PHASE", "READY", "ZONES", "GEN", "AGE"},
		{"Widget", "w1", "Running", "2/2", "-", "1", "60m"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get (-want +got):\n%s\n%s", diff, out)
	}
}

// TestDescribeScalerHasNoPods: a Scaler's describe shows no pods line and
// no tables of pods per zone or cluster.
func TestDescribeScalerHasNoPods(t *testing.T) {
	st := computeapi.WorkloadStatus{Phase: "Running", Zones: map[string]computeapi.Counts{"a": {}}, Clusters: map[string]computeapi.Counts{"zone-a": {}}}
	var b strings.Builder
	describeWorkload(&b, computeapi.Workload{Kind: kindScaler, Metadata: computeapi.Metadata{Name: "web"}, Status: st}, nil, nil, time.Now())
	for _, absent := range []string{"Pods:", "Zones:", "Clusters:"} {
		if strings.Contains(b.String(), absent) {
			t.Errorf("a Scaler's describe shows %q:\n%s", absent, b.String())
		}
	}
	b.Reset()
	describeWorkload(&b, computeapi.Workload{Kind: kindApp, Metadata: computeapi.Metadata{Name: "web"}, Status: st}, nil, nil, time.Now())
	for _, present := range []string{"Pods:", "Zones:", "Clusters:"} {
		if !strings.Contains(b.String(), present) {
			t.Errorf("an App's describe lacks %q:\n%s", present, b.String())
		}
	}
}

// TestNamesMatchAPI: the names the CLI keeps of its own (it does not link
// libs/api) are libs/api's.
func TestNamesMatchAPI(t *testing.T) {
	pairs := [][2]string{
		{kindApp, api.KindApp}, {kindJobSet, api.KindJobSet}, {kindPod, api.KindPod}, {kindCronJob, api.KindCronJob},
		{kindDaemon, api.KindDaemon}, {kindTrainingJob, api.KindTrainingJob}, {kindScaler, api.KindScaler},
		{kindConfig, api.KindConfig}, {kindSecret, api.KindSecret},
		{opPause, api.OpPause}, {opResume, api.OpResume}, {opStop, api.OpStop}, {opStart, api.OpStart},
		{opRestart, api.OpRestart}, {opRestartContainer, api.OpRestartContainer}, {opScale, api.OpScale},
		{opRolloutPause, api.OpRolloutPause}, {opRolloutResume, api.OpRolloutResume}, {opRolloutUndo, api.OpRolloutUndo},
		{eventAdmitted, api.EventAdmitted}, {eventScheduled, api.EventScheduled}, {eventPropagated, api.EventPropagated},
		{eventRunning, api.EventRunning}, {eventScaled, api.EventScaled}, {phaseRunning, api.PhaseRunning},
		{labelBufferPercent, api.LabelBufferPercent}, {defaultRolloutPolicy, api.RolloutPause},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("CLI %q, libs/api %q", p[0], p[1])
		}
	}
}
