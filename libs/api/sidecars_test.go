package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestSidecarSpecValidate(t *testing.T) {
	log := api.ManagedSidecar{Container: api.Container{Name: "log", Image: "log:1"}}
	tests := []struct {
		name string
		spec api.SidecarSpec
		want []string // fields
	}{
		{"valid", api.SidecarSpec{Sidecars: []api.ManagedSidecar{log}}, nil},
		{"empty list", api.SidecarSpec{}, nil},
		{"bad name and no image", api.SidecarSpec{Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "Log!"}}}},
			[]string{"sidecars[0].name", "sidecars[0].image"}},
		{"duplicate", api.SidecarSpec{Sidecars: []api.ManagedSidecar{log, log}}, []string{"sidecars[1].name"}},
		{"privileged", api.SidecarSpec{Sidecars: []api.ManagedSidecar{{Container: api.Container{Name: "x", Image: "x", Privileged: true}}}},
			[]string{"sidecars[0].privileged"}},
		{"kinds", api.SidecarSpec{Sidecars: []api.ManagedSidecar{{Container: log.Container, Kinds: []string{"app", "Nope", "Scaler"}}}},
			[]string{"sidecars[0].kinds[1]", "sidecars[0].kinds[2]"}},
		{"rollout", api.SidecarSpec{Rollout: api.SidecarRollout{MaxUnavailable: -1, BakeSeconds: -1, OnFailure: "Panic"}},
			[]string{"rollout.maxUnavailable", "rollout.bakeSeconds", "rollout.onFailure"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, f := range tt.spec.Validate() {
				got = append(got, f.Field)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSidecarVersionFor(t *testing.T) {
	v := api.SidecarVersion{Version: 3, SidecarSpec: api.SidecarSpec{Sidecars: []api.ManagedSidecar{
		{Container: api.Container{Name: "log", Image: "log:2"}},
		{Container: api.Container{Name: "mesh", Image: "mesh:1"}, Kinds: []string{"App"}, Projects: []string{"web"}},
	}}}
	tests := []struct {
		kind, project string
		want          []string
	}{
		{"App", "web", []string{"log", "mesh"}},
		{"App", "batch", []string{"log"}},
		{"JobSet", "web", []string{"log"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.project, func(t *testing.T) {
			var got []string
			for _, c := range v.For(tt.kind, tt.project) {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("sidecars (-want +got):\n%s", diff)
			}
		})
	}
	if n, ok := api.SidecarVersionOfKey(api.SidecarVersionKey(12)); !ok || n != 12 {
		t.Errorf("SidecarVersionOfKey(SidecarVersionKey(12)) = %d, %v", n, ok)
	}
}
