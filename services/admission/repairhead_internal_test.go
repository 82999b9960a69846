package admission

import (
	"encoding/json"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// repairApp is an App with two containers, environment and resources:
// what the repair reads most often.
func repairApp(edit func(t *api.PodTemplate)) *api.Workload {
	replicas := int32(2)
	spec := &api.AppSpec{Replicas: &replicas}
	for _, c := range []string{"server", "metrics"} {
		spec.Template.Containers = append(spec.Template.Containers, api.Container{
			Name: c, Image: "registry.example/" + c + ":1.4.2",
			Command:   []string{"/bin/" + c, "--listen=:8080"},
			Env:       []api.EnvVar{{Name: "MODE", Value: "from-valueFrom"}, {Name: "LEVEL", Value: "info"}},
			Resources: api.Resources{Requests: api.ResourceList{CPU: "500m", Memory: "512Mi"}},
		})
	}
	if edit != nil {
		edit(&spec.Template)
	}
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
		Metadata: api.Metadata{Project: "p", Name: "web", Generation: 3, Event: api.EventAdmitted},
		Spec:     spec}
}

// TestMayNameConfigsNeverMissesARef checks the repair's prefilter against
// api.PodTemplate.Refs: every way a template names a Config or Secret
// passes it, and a template naming none is told apart, unless a string
// in it is exactly a field's name (then it is only decoded).
func TestMayNameConfigsNeverMissesARef(t *testing.T) {
	ref := api.ConfigRef{Kind: api.KindConfig, Name: "settings"}
	for _, tc := range []struct {
		name string
		edit func(t *api.PodTemplate)
		want bool // names a Config
		may  bool // passes the prefilter (want implies may)
	}{
		{"none", nil, false, false},
		{"a value that reads as a field", func(t *api.PodTemplate) {
			t.Containers[0].Env = append(t.Containers[0].Env, api.EnvVar{Name: "SOURCE", Value: "envFrom"})
		}, false, true},
		{"env valueFrom", func(t *api.PodTemplate) {
			t.Containers[0].Env = append(t.Containers[0].Env, api.EnvVar{Name: "X", ValueFrom: &api.EnvSource{ConfigRef: ref, Key: "x"}})
		}, true, true},
		{"envFrom", func(t *api.PodTemplate) {
			t.Containers[1].EnvFrom = []api.EnvFromSource{{ConfigRef: ref}}
		}, true, true},
		{"init container envFrom", func(t *api.PodTemplate) {
			t.InitContainers = []api.Container{{Name: "init", Image: "i:1", EnvFrom: []api.EnvFromSource{{ConfigRef: ref}}}}
		}, true, true},
		{"sidecar valueFrom", func(t *api.PodTemplate) {
			t.Sidecars = []api.Container{{Name: "proxy", Image: "p:1", Env: []api.EnvVar{{Name: "Y", ValueFrom: &api.EnvSource{ConfigRef: ref, Key: "y"}}}}}
		}, true, true},
		{"config volume", func(t *api.PodTemplate) {
			t.Volumes = []api.Volume{{Name: "cfg", Config: &api.ConfigVolume{Name: "settings"}}}
		}, true, true},
		{"secret volume", func(t *api.PodTemplate) {
			t.Volumes = []api.Volume{{Name: "tls", Secret: &api.ConfigVolume{Name: "cert"}}}
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := repairApp(tc.edit)
			raw, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			refs := len(w.Spec.PodTemplate().Refs()) > 0
			if refs != tc.want {
				t.Fatalf("the case names configs: %v, want %v", refs, tc.want)
			}
			if got := mayNameConfigs(raw); got != tc.may {
				t.Errorf("mayNameConfigs = %v, want %v", got, tc.may)
			}
			h, err := headOf(bus.Entry[repairDoc]{Value: repairDoc{raw: raw}})
			if err != nil {
				t.Fatal(err)
			}
			if s := h.stub(); s.Key() != w.Key() || h.Metadata.Generation != 3 || h.Metadata.Event != api.EventAdmitted {
				t.Errorf("head %+v, stub key %s: want %s at generation 3, %s", h, s.Key(), w.Key(), api.EventAdmitted)
			}
		})
	}
}

// BenchmarkRepairRead compares what the repair reads of a workload that
// needs nothing (its head) with decoding the whole workload.
func BenchmarkRepairRead(b *testing.B) {
	raw, err := json.Marshal(repairApp(nil))
	if err != nil {
		b.Fatal(err)
	}
	e := bus.Entry[repairDoc]{Value: repairDoc{raw: raw}}
	b.Run("head", func(b *testing.B) {
		for b.Loop() {
			if _, err := headOf(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("workload", func(b *testing.B) {
		for b.Loop() {
			if _, err := workloadOf(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
