package autoscaler

import (
	"encoding/json"
	"testing"

	"atoll.dev/libs/api"
)

// TestViewsReadWhatTheWholeDocumentSays: the projections the autoscaler
// keeps of an App and its status give what decoding the whole document
// gives, for the fields a Scaler's reconcile reads.
func TestViewsReadWhatTheWholeDocumentSays(t *testing.T) {
	for _, c := range []struct{ name, spec, control string }{
		{"replicas set", `"replicas":3,`, ``},
		{"replicas unset", ``, ``},
		{"paused", `"replicas":3,`, `,"control":{"paused":true}`},
		{"stopped", `"replicas":3,`, `,"control":{"stopped":true}`},
	} {
		b := []byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web","generation":7},"spec":{` + c.spec +
			`"template":{"containers":[{"name":"c","image":"i"}]}}` + c.control + `}`)
		full, err := api.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v, err := decodeApp(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := appView{Generation: full.Metadata.Generation, Pods: full.Spec.Pods(), Stopped: full.Control.Stopped, Paused: full.Control.Paused}
		if v != want {
			t.Errorf("%s: %+v, want %+v", c.name, v, want)
		}
	}
	st := api.Status{Generation: 7, Phase: api.PhaseRunning, Desired: 3, Ready: 2, Clusters: map[string]api.ZoneStatus{"zone-a": {Desired: 3, Ready: 2}}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := decodeStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	if sv != (statusView{Generation: 7, Ready: 2}) {
		t.Errorf("status view %+v", sv)
	}
}
