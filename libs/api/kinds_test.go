package api_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestKindsTable: the table lists each kind once, sorted, with a spec
// constructor, and every operation it names is one of api.Ops, in Ops'
// order.
func TestKindsTable(t *testing.T) {
	var names []string
	for _, k := range api.Kinds() {
		names = append(names, k.Name)
		if k.New == nil || k.New() == nil {
			t.Errorf("%s: no spec constructor", k.Name)
		}
		for _, op := range k.Ops {
			if !slices.Contains(api.Ops, op) {
				t.Errorf("%s: operation %q is not one of api.Ops", k.Name, op)
			}
		}
		if !slices.IsSortedFunc(k.Ops, func(a, b string) int { return slices.Index(api.Ops, a) - slices.Index(api.Ops, b) }) {
			t.Errorf("%s: operations %v are not in api.Ops' order", k.Name, k.Ops)
		}
	}
	if diff := cmp.Diff(api.KindNames(), names); diff != "" {
		t.Errorf("Kinds() names (-KindNames +Kinds):\n%s", diff)
	}
	want := []string{api.KindApp, api.KindConfig, api.KindCronJob, api.KindDaemon, api.KindJobSet, api.KindPod, api.KindScaler, api.KindSecret, api.KindTrainingJob}
	if diff := cmp.Diff(want, api.KindNames()); diff != "" {
		t.Errorf("KindNames (-want +got):\n%s", diff)
	}
}

// TestKindCapabilities: what each kind can do comes from its registration.
func TestKindCapabilities(t *testing.T) {
	all := []string{api.OpPause, api.OpResume, api.OpStop, api.OpStart, api.OpRestart, api.OpRestartContainer}
	tests := []struct {
		kind                                   string
		placed, adminOnly, everyCluster, noPod bool
		ops                                    []string
	}{
		{api.KindApp, true, false, false, false, api.Ops},
		{api.KindJobSet, true, false, false, false, append(slices.Clone(all), api.OpScale)},
		{api.KindPod, true, false, false, false, []string{api.OpStop, api.OpStart, api.OpRestart, api.OpRestartContainer}},
		{api.KindCronJob, true, false, false, false, all},
		{api.KindDaemon, true, true, true, false, []string{api.OpStop, api.OpStart, api.OpRestart, api.OpRestartContainer}},
		{api.KindTrainingJob, true, false, false, false, all},
		{api.KindScaler, false, false, false, true, []string{api.OpPause, api.OpResume}},
		{api.KindConfig, false, false, false, true, nil},
		{api.KindSecret, false, false, false, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			k, ok := api.LookupKind(tc.kind)
			if !ok {
				t.Fatalf("%s is not registered", tc.kind)
			}
			got := []bool{api.Placed(tc.kind), api.AdminOnly(tc.kind), api.EveryCluster(tc.kind), k.NoPods}
			if diff := cmp.Diff([]bool{tc.placed, tc.adminOnly, tc.everyCluster, tc.noPod}, got); diff != "" {
				t.Errorf("placed, adminOnly, everyCluster, noPods (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.ops, k.Ops); diff != "" {
				t.Errorf("ops (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookupKind: any case finds the kind as registered; what the caller
// gets is its own copy.
func TestLookupKind(t *testing.T) {
	for _, name := range []string{"Scaler", "scaler", "SCALER", "sCaLeR"} {
		k, ok := api.LookupKind(name)
		if !ok || k.Name != api.KindScaler {
			t.Errorf("LookupKind(%q) = %q, %v; want Scaler", name, k.Name, ok)
		}
	}
	for _, name := range []string{"", "Deployment", "scalers"} {
		if k, ok := api.LookupKind(name); ok {
			t.Errorf("LookupKind(%q) = %q, want none", name, k.Name)
		}
	}
	k, _ := api.LookupKind(api.KindApp)
	k.Ops[0] = "explode"
	if again, _ := api.LookupKind(api.KindApp); again.Ops[0] != api.OpPause {
		t.Errorf("a caller changed the table: %v", again.Ops)
	}
}

// TestOperationCheckKind: an operation the kind does not support is
// refused on "op", with what the kind supports; the rest is Validate's.
func TestOperationCheckKind(t *testing.T) {
	two := int32(2)
	tests := []struct {
		name string
		op   api.Operation
		want string // the reason, or "" for none
	}{
		{"pause an App", api.Operation{Kind: api.KindApp, Op: api.OpPause}, ""},
		{"pause a Pod", api.Operation{Kind: api.KindPod, Op: api.OpPause}, "a Pod cannot be paused or resumed; its operations are stop, start, restart, restart-container"},
		{"resume a Pod", api.Operation{Kind: api.KindPod, Op: api.OpResume}, "a Pod cannot be paused or resumed; its operations are stop, start, restart, restart-container"},
		{"scale a Pod", api.Operation{Kind: api.KindPod, Op: api.OpScale, Replicas: &two}, "a Pod cannot be scaled; its operations are stop, start, restart, restart-container"},
		{"scale a JobSet", api.Operation{Kind: api.KindJobSet, Op: api.OpScale, Replicas: &two}, ""},
		{"roll out a JobSet", api.Operation{Kind: api.KindJobSet, Op: api.OpRolloutUndo}, "a JobSet cannot be rolled out zone by zone (only an App is)"},
		{"restart a Scaler", api.Operation{Kind: api.KindScaler, Op: api.OpRestart}, "a Scaler cannot be restarted; its operations are pause, resume"},
		{"stop a Scaler", api.Operation{Kind: api.KindScaler, Op: api.OpStop}, "a Scaler cannot be stopped or started"},
		{"pause a Scaler", api.Operation{Kind: api.KindScaler, Op: api.OpPause}, ""},
		{"restart a Secret", api.Operation{Kind: api.KindSecret, Op: api.OpRestart}, "a Secret cannot be restarted; it has no operations"},
		{"pause a Daemon", api.Operation{Kind: api.KindDaemon, Op: api.OpPause}, "a Daemon cannot be paused or resumed"},
		{"unknown kind", api.Operation{Kind: "Deployment", Op: api.OpPause}, ""},
		{"unknown op", api.Operation{Kind: api.KindApp, Op: "explode"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := tc.op.CheckKind()
			if tc.want == "" {
				if len(fe) > 0 {
					t.Fatalf("refused: %v", fe)
				}
				return
			}
			if len(fe) != 1 || fe[0].Field != "op" || fe[0].Code != api.CodeUnsupported || !strings.HasPrefix(fe[0].Reason, tc.want) {
				t.Errorf("got %+v, want op/Unsupported starting %q", fe, tc.want)
			}
		})
	}
}

// TestEveryKindHasAnExample: the documents of deploy/examples cover every
// registered kind, and each decodes and is valid.
func TestEveryKindHasAnExample(t *testing.T) {
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if !strings.Contains(doc, "apiVersion: "+api.APIVersion) {
				continue // not a workload (a rotation plan)
			}
			w, err := api.DecodeYAML([]byte(doc))
			if err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			w.Spec.Default()
			if fe := api.Validate(w); len(fe) > 0 {
				t.Errorf("%s document %d: %v", f, i, fe)
			}
			seen[w.Kind] = true
		}
	}
	for _, k := range api.KindNames() {
		if !seen[k] {
			t.Errorf("no example of %s in deploy/examples", k)
		}
	}
}

// TestPausedSaysWhatPauseDoes: a kind that can be paused says what pausing
// it does (admission's paused event), and one that cannot says nothing.
func TestPausedSaysWhatPauseDoes(t *testing.T) {
	for _, k := range api.Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			if got, want := k.Paused != "", k.Supports(api.OpPause); got != want {
				t.Errorf("Paused = %q with pause supported %v", k.Paused, want)
			}
		})
	}
}
