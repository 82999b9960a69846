package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// setSidecars writes version v of the managed sidecars as the current
// one, as the gateway does.
func setSidecars(t *testing.T, b *bus.Bus, v api.SidecarVersion) {
	t.Helper()
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketSidecars)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(v)
	if _, err := kv.Put(ctx, api.SidecarVersionKey(v.Version), doc); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, api.SidecarCurrentKey, doc); err != nil {
		t.Fatal(err)
	}
}

// TestSubmitInjectsTheCurrentSidecarVersion checks that admission injects
// the current version of the managed sidecars (those that apply to the
// workload's kind and project) and records the version; a new version
// reaches the next workload written, whole.
func TestSubmitInjectsTheCurrentSidecarVersion(t *testing.T) {
	b := region(t)
	submit := func(project, kind, name string) *api.Workload {
		t.Helper()
		var doc string
		switch kind {
		case api.KindApp:
			doc = fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, project, name)
		default:
			doc = fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":%q,"name":%q},"spec":{"completions":1,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, project, name)
		}
		reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
		if eb != nil {
			t.Fatalf("submit %s/%s: %+v", project, name, eb)
		}
		w, err := api.Decode(reply.Data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	images := func(w *api.Workload) []string {
		var out []string
		for _, c := range w.Spec.PodTemplate().Sidecars {
			out = append(out, c.Name+"="+c.Image)
		}
		return out
	}

	// Before any version is set: admission's own configuration, version 0.
	if w := submit("p", api.KindApp, "before"); w.Metadata.SidecarVersion != 0 || len(images(w)) != 1 {
		t.Errorf("before any version: version %d, sidecars %v", w.Metadata.SidecarVersion, images(w))
	}

	v1 := api.SidecarVersion{Version: 1, SidecarSpec: api.SidecarSpec{Sidecars: []api.ManagedSidecar{
		{Container: api.Container{Name: "log", Image: "log:1"}},
		{Container: api.Container{Name: "mesh", Image: "mesh:1"}, Kinds: []string{"App"}, Projects: []string{"web"}},
	}}, Created: time.Now().UTC()}
	setSidecars(t, b, v1)
	deadline := time.Now().Add(5 * time.Second)
	var w *api.Workload
	for i := 0; ; i++ {
		w = submit("web", api.KindApp, fmt.Sprintf("a%d", i))
		if w.Metadata.SidecarVersion == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	tests := []struct {
		name string
		w    *api.Workload
		want []string
	}{
		{"App in web", w, []string{"log=log:1", "mesh=mesh:1"}},
		{"App elsewhere", submit("p", api.KindApp, "app"), []string{"log=log:1"}},
		{"JobSet in web", submit("web", api.KindJobSet, "batch"), []string{"log=log:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.w.Metadata.SidecarVersion != 1 {
				t.Errorf("sidecar version %d, want 1", tt.w.Metadata.SidecarVersion)
			}
			if diff := cmp.Diff(tt.want, images(tt.w)); diff != "" {
				t.Errorf("sidecars (-want +got):\n%s", diff)
			}
		})
	}

	// A user cannot choose a version: admission sets it.
	doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"forged","sidecarVersion":7},"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`
	reply, eb := call(t, b, bus.AdmissionSubmit, []byte(doc), nil)
	if eb == nil {
		fw, _ := api.Decode(reply.Data)
		if fw.Metadata.SidecarVersion != 1 {
			t.Errorf("a submitted sidecarVersion 7 was kept as %d", fw.Metadata.SidecarVersion)
		}
	}
}
