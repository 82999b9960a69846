package rollout

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func tmpl(image string) *api.PodTemplate {
	return &api.PodTemplate{Containers: []api.Container{{Name: "app", Image: image}}}
}

// step is one reconcile of a scenario: the clock moves by after, the
// zones show obs (by zone: "desired/available", "x" crash-looping, ""
// not current), then the state is checked.
type step struct {
	after   time.Duration
	image   string            // spec image; empty: unchanged
	sidecar string            // the managed sidecar's image; empty: unchanged
	obs     map[string]string // zone -> "d/a" (current), "d/a!" (not current), "crash"
	control string            // a rollout operation made now
	want    string            // phase and zone states: "Progressing a=Done b=Baking c=Pending"
	events  string            // events of this step, "" when none: "rollout-zone-done:a rollout-zone-started:b"
}

func parseObs(t *testing.T, spec map[string]string, zones []string) map[string]ZoneObservation {
	out := map[string]ZoneObservation{}
	for _, z := range zones {
		s := spec[z]
		o := ZoneObservation{Desired: 3, Current: true, UpdatedAvailable: 3}
		switch s {
		case "":
		case "crash":
			o.CrashLooping, o.UpdatedAvailable = true, 0
		default:
			var d, a int32
			cur := !strings.HasSuffix(s, "!")
			if _, err := fmt.Sscanf(strings.TrimSuffix(s, "!"), "%d/%d", &d, &a); err != nil {
				t.Fatalf("obs %q: %v", s, err)
			}
			o = ZoneObservation{Desired: d, UpdatedAvailable: a, Current: cur}
		}
		out[z] = o
	}
	return out
}

func describe(r *api.Rollout) string {
	parts := []string{r.Phase}
	for _, z := range r.Zones {
		parts = append(parts, z.Zone+"="+z.State)
	}
	return strings.Join(parts, " ")
}

func eventsOf(r *api.Rollout) string {
	var parts []string
	for _, e := range r.Events {
		parts = append(parts, e.Event+":"+e.Zone)
	}
	return strings.Join(parts, " ")
}

func TestStep(t *testing.T) {
	bake, deadline := int32(30), int32(120)
	strategies := map[string]*api.RolloutStrategy{
		"pause":        {BakeSeconds: &bake, DeadlineSeconds: &deadline},
		"rollbackZone": {BakeSeconds: &bake, DeadlineSeconds: &deadline, OnFailure: api.RolloutRollbackZone},
		"rollbackAll":  {BakeSeconds: &bake, DeadlineSeconds: &deadline, OnFailure: api.RolloutRollbackAll},
		"order c,a":    {BakeSeconds: &bake, DeadlineSeconds: &deadline, Order: []string{"c", "a"}},
	}
	// Every scenario starts from a complete rollout of image v1 over a, b,
	// c and changes the image to v2 in its first step.
	tests := []struct {
		name     string
		strategy string
		steps    []step
	}{
		{"one zone at a time with bake", "pause", []step{
			{image: "v2", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: 10 * time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 29 * time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: time.Second, obs: map[string]string{"b": "3/0"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: 5 * time.Second, want: "Progressing a=Done b=Baking c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"c": "3/1"}, want: "Progressing a=Done b=Done c=Updating", events: "rollout-zone-done:b rollout-zone-started:c"},
			{after: time.Second, want: "Progressing a=Done b=Done c=Baking"},
			{after: 30 * time.Second, want: "Complete a=Done b=Done c=Done", events: "rollout-zone-done:c"},
		}},
		{"stated order", "order c,a", []step{
			{image: "v2", obs: map[string]string{"c": "3/0"}, want: "Progressing c=Updating a=Pending b=Pending", events: "rollout-zone-started:c"},
		}},
		{"a zone not applied yet is not available", "pause", []step{
			{image: "v2", obs: map[string]string{"a": "3/3!"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: 40 * time.Second, obs: map[string]string{"a": "3/3!"}, want: "Progressing a=Updating b=Pending c=Pending"},
		}},
		{"losing availability restarts the bake", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 20 * time.Second, obs: map[string]string{"a": "3/2"}, want: "Progressing a=Updating b=Pending c=Pending"},
			{after: 5 * time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 29 * time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: time.Second, obs: map[string]string{"b": "3/0"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
		}},
		{"scaling mid-rollout: the zone must reach the new size", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 10 * time.Second, obs: map[string]string{"a": "4/3"}, want: "Progressing a=Updating b=Pending c=Pending"},
			{after: 10 * time.Second, obs: map[string]string{"a": "4/4"}, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "4/0"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
		}},
		{"deadline pauses", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "3/0"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: 119 * time.Second, obs: map[string]string{"b": "3/1"}, want: "Progressing a=Done b=Updating c=Pending"},
			{after: time.Second, obs: map[string]string{"b": "3/1"}, want: "Paused a=Done b=Failed c=Pending", events: "rollout-paused:b"},
			{after: time.Hour, obs: map[string]string{"b": "3/1"}, want: "Paused a=Done b=Failed c=Pending"},
		}},
		{"crash-looping rolls the zone back", "rollbackZone", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "crash"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: time.Second, obs: map[string]string{"b": "crash"}, want: "Paused a=Done b=RolledBack c=Pending", events: "rollout-paused:b rollout-rolled-back:b"},
		}},
		{"failure rolls every zone back", "rollbackAll", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "crash"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: time.Second, obs: map[string]string{"b": "crash"}, want: "RolledBack a=RolledBack b=RolledBack c=Pending", events: "rollout-paused:b rollout-rolled-back:"},
			{after: time.Minute, want: "RolledBack a=RolledBack b=RolledBack c=Pending"},
		}},
		{"pause and resume by a user", "pause", []step{
			{image: "v2", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, control: api.OpRolloutPause, want: "Paused a=Updating b=Pending c=Pending", events: "rollout-paused:"},
			{after: time.Hour, want: "Paused a=Updating b=Pending c=Pending"},
			{after: time.Second, control: api.OpRolloutResume, want: "Progressing a=Baking b=Pending c=Pending"},
		}},
		{"resume retries the failed zone", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "crash"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: time.Second, obs: map[string]string{"b": "crash"}, want: "Paused a=Done b=Failed c=Pending", events: "rollout-paused:b"},
			{after: time.Second, control: api.OpRolloutResume, obs: map[string]string{"b": "3/0"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-started:b"},
		}},
		{"undo after a failure", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, want: "Progressing a=Baking b=Pending c=Pending"},
			{after: 30 * time.Second, obs: map[string]string{"b": "crash"}, want: "Progressing a=Done b=Updating c=Pending", events: "rollout-zone-done:a rollout-zone-started:b"},
			{after: time.Second, obs: map[string]string{"b": "crash"}, want: "Paused a=Done b=Failed c=Pending", events: "rollout-paused:b"},
			{after: time.Second, control: api.OpRolloutUndo, want: "RolledBack a=RolledBack b=RolledBack c=Pending", events: "rollout-rolled-back:"},
			{after: time.Second, control: api.OpRolloutResume, want: "RolledBack a=RolledBack b=RolledBack c=Pending"},
		}},
		{"a new template after an undo rolls out again", "pause", []step{
			{image: "v2", want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, control: api.OpRolloutUndo, want: "RolledBack a=RolledBack b=Pending c=Pending", events: "rollout-rolled-back:"},
			{after: time.Second, image: "v3", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
		}},
		{"a change of the managed sidecars only is stable at once", "pause", []step{
			{sidecar: "log:v2", want: "Complete a=Done b=Done c=Done"},
			{after: time.Second, sidecar: "log:v3", want: "Complete a=Done b=Done c=Done"},
			// The sidecar rollout's rollback.
			{after: time.Second, sidecar: "log:v2", want: "Complete a=Done b=Done c=Done"},
			{after: time.Minute, want: "Complete a=Done b=Done c=Done"},
		}},
		{"an image change with a sidecar change rolls out", "pause", []step{
			{image: "v2", sidecar: "log:v2", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
		}},
		{"a sidecar change that undoes a rollout's own change completes it", "pause", []step{
			{image: "v2", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, image: "v1", sidecar: "log:v2", want: "Complete a=Done b=Done c=Done"},
		}},
		{"the old template again ends the rollout", "pause", []step{
			{image: "v2", obs: map[string]string{"a": "3/0"}, want: "Progressing a=Updating b=Pending c=Pending", events: "rollout-zone-started:a"},
			{after: time.Second, image: "v1", want: "Complete a=Done b=Done c=Done"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			zones := []string{"a", "b", "c"}
			in := Input{Key: "p.app.web", Now: now, Template: tmpl("v1"), Strategy: strategies[tt.strategy],
				Zones: parseObs(t, nil, zones)}
			r, changed := Step(nil, in)
			if !changed || r.Phase != api.RolloutComplete {
				t.Fatalf("first step: %s, changed %v", describe(r), changed)
			}
			image, sidecar := "v1", ""
			for i, s := range tt.steps {
				now = now.Add(s.after)
				in.Now = now
				if s.image != "" || s.sidecar != "" {
					image, sidecar = cmp.Or(s.image, image), cmp.Or(s.sidecar, sidecar)
					in.Template = tmpl(image)
					if sidecar != "" {
						in.Template.Sidecars = []api.Container{{Name: "log", Image: sidecar}}
					}
				}
				if s.control != "" {
					in.Control = &api.RolloutControl{Op: s.control, At: now, Paused: s.control == api.OpRolloutPause}
				}
				in.Zones = parseObs(t, s.obs, zones)
				next, changed := Step(r, in)
				if diff := gocmp.Diff(s.want, describe(next)); diff != "" {
					t.Fatalf("step %d: state (-want +got):\n%s", i, diff)
				}
				got := ""
				if changed {
					got = eventsOf(next)
					if next.Seq != r.Seq+1 {
						t.Fatalf("step %d: seq %d after %d", i, next.Seq, r.Seq)
					}
				}
				if diff := gocmp.Diff(s.events, got); diff != "" {
					t.Fatalf("step %d: events (-want +got):\n%s", i, diff)
				}
				r = next
			}
		})
	}
}

// TestTemplateFor checks what the propagator renders per zone.
func TestTemplateFor(t *testing.T) {
	v1, v2 := tmpl("v1"), tmpl("v2")
	r := &api.Rollout{Phase: api.RolloutProgressing, Stable: api.TemplateHash(v1), StableTemplate: v1,
		Target: api.TemplateHash(v2), Zones: []api.ZoneRollout{
			{Zone: "a", State: api.ZoneDone, Revision: api.TemplateHash(v2)},
			{Zone: "b", State: api.ZonePending, Revision: api.TemplateHash(v1)},
		}}
	tests := []struct {
		name string
		r    *api.Rollout
		zone string
		spec *api.PodTemplate
		want string
	}{
		{"no rollout document", nil, "a", v2, "v2"},
		{"zone given the target", r, "a", v2, "v2"},
		{"zone not yet", r, "b", v2, "v1"},
		{"zone unknown", r, "z", v2, "v1"},
		{"spec is the stable one", r, "b", v1, "v1"},
		{"spec changed before the controller saw it", r, "a", tmpl("v3"), "v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.TemplateFor(tt.zone, tt.spec).Containers[0].Image
			if diff := gocmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
