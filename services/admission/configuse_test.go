package admission_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
	"atoll.dev/services/admission"
)

func configDoc(name, data string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"project":"p","name":%q},"spec":{"data":%s}}`, name, data)
}

// userDoc is a workload of kind whose container reads env (a JSON array)
// and the template's volumes (a JSON array, or "").
func userDoc(kind, name, env, volumes string) []byte {
	v := ""
	if volumes != "" {
		v = `,"volumes":` + volumes
	}
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":%q,"metadata":{"project":"p","name":%q},"spec":{"template":{"containers":[{"name":"a","image":"x:1","env":%s}]%s}}}`,
		kind, name, env, v)
}

// errFields is an admission error's status and the fields it names.
func errFields(err error) (int, []string) {
	var ae *admission.Error
	if !errors.As(err, &ae) {
		return 0, nil
	}
	var fs []string
	for _, f := range ae.Body.Fields {
		fs = append(fs, f.Field+" "+f.Code)
	}
	return ae.Status, fs
}

func TestMissingReferencesAreRefused(t *testing.T) {
	sealer, _ := kek(t)
	_, a := secretRegion(t, sealer)
	ctx := context.Background()
	alice := admission.Principal{Name: "alice"}
	if _, err := a.Submit(ctx, configDoc("conf", `{"level":"info"}`), alice); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, secretDoc("creds", map[string]string{"password": "hunter2"}), alice); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, volumes string
		status             int
		fields             []string
	}{
		{name: "present", env: `[{"name":"L","valueFrom":{"kind":"Config","name":"conf","key":"level"}},{"name":"P","valueFrom":{"kind":"Secret","name":"creds","key":"password"}}]`,
			volumes: `[{"name":"c","config":{"name":"conf","items":[{"key":"level","path":"level"}]}}]`},
		{name: "missing config", env: `[{"name":"L","valueFrom":{"kind":"Config","name":"nope","key":"level"}}]`,
			status: 422, fields: []string{"spec.template.containers[0].env[0].valueFrom.name NotFound"}},
		{name: "missing but optional", env: `[{"name":"L","valueFrom":{"kind":"Config","name":"nope","key":"level","optional":true}}]`},
		{name: "missing key", env: `[{"name":"P","valueFrom":{"kind":"Secret","name":"creds","key":"user"}}]`,
			status: 422, fields: []string{"spec.template.containers[0].env[0].valueFrom.key NotFound"}},
		{name: "missing volume item", env: `[]`, volumes: `[{"name":"c","config":{"name":"conf","items":[{"key":"level","path":"l"},{"key":"other","path":"o"}]}}]`,
			status: 422, fields: []string{"spec.template.volumes[0].config.items[1].key NotFound"}},
		{name: "missing secret volume", env: `[]`, volumes: `[{"name":"s","secret":{"name":"gone"}}]`,
			status: 422, fields: []string{"spec.template.volumes[0].secret.name NotFound"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Submit(ctx, userDoc(api.KindApp, fmt.Sprintf("app%d", i), tc.env, tc.volumes), alice)
			status, fields := errFields(err)
			if err != nil && status == 0 {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Errorf("status %d, want %d (%v)", status, tc.status, err)
			}
			if diff := cmp.Diff(tc.fields, fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// An App carries the version of what it names (not of what it names
// without rollout); a change of a Config's content is a new generation of
// the App with the new version; a JobSet carries none.
func TestConfigChangeRollsTheApps(t *testing.T) {
	_, a := secretRegion(t, nil)
	ctx := context.Background()
	alice := admission.Principal{Name: "alice"}
	if _, err := a.Submit(ctx, configDoc("conf", `{"level":"info"}`), alice); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, configDoc("quiet", `{"x":"1"}`), alice); err != nil {
		t.Fatal(err)
	}
	env := `[{"name":"L","valueFrom":{"kind":"Config","name":"conf","key":"level"}},{"name":"X","valueFrom":{"kind":"Config","name":"quiet","key":"x","rolloutOnChange":false}}]`
	app, err := a.Submit(ctx, userDoc(api.KindApp, "web", env, ""), alice)
	if err != nil {
		t.Fatal(err)
	}
	js, err := a.Submit(ctx, userDoc(api.KindJobSet, "batch", env, ""), alice)
	if err != nil {
		t.Fatal(err)
	}
	v1 := app.Spec.PodTemplate().ConfigVersions
	if len(v1) != 1 || v1["Config/conf"] == "" {
		t.Fatalf("App versions %v, want Config/conf only", v1)
	}
	if v := js.Spec.PodTemplate().ConfigVersions; v != nil {
		t.Errorf("JobSet versions %v, want none", v)
	}
	if _, err := a.Update(ctx, configDoc("conf", `{"level":"debug"}`), alice); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Update(ctx, configDoc("quiet", `{"x":"2"}`), alice); err != nil {
		t.Fatal(err)
	}
	got := get(t, a, api.KindApp, "web")
	if v2 := got.Spec.PodTemplate().ConfigVersions; v2["Config/conf"] == v1["Config/conf"] || len(v2) != 1 {
		t.Errorf("versions after the change %v, were %v", v2, v1)
	}
	if got.Metadata.Generation != 2 || got.Metadata.Event != api.EventUpdated {
		t.Errorf("generation %d event %s, want 2 Updated (the quiet Config rolls nothing)", got.Metadata.Generation, got.Metadata.Event)
	}
	if g := get(t, a, api.KindJobSet, "batch").Metadata.Generation; g != 1 {
		t.Errorf("JobSet generation %d, want 1", g)
	}
}

// A Config written by a replica that died before rolling its users: the
// repair loop rolls them (its config-use part, which compared the key's
// kind in the wrong case and so never ran before).
func TestRepairRollsTheUsersOfAConfigLeftUnrolled(t *testing.T) {
	b, a := secretRegion(t, nil)
	ctx := context.Background()
	alice := admission.Principal{Name: "alice"}
	if _, err := a.Submit(ctx, configDoc("conf", `{"level":"info"}`), alice); err != nil {
		t.Fatal(err)
	}
	env := `[{"name":"L","valueFrom":{"kind":"Config","name":"conf","key":"level"}}]`
	app, err := a.Submit(ctx, userDoc(api.KindApp, "web", env, ""), alice)
	if err != nil {
		t.Fatal(err)
	}
	v1 := app.Spec.PodTemplate().ConfigVersions["Config/conf"]

	dying := admission.New(b, slog.Default(), admission.DefaultConfig())
	admission.Crash(dying) // writes, then neither publishes nor rolls
	if err := dying.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dying.Stop() })
	if _, err := dying.Update(ctx, configDoc("conf", `{"level":"debug"}`), alice); err != nil {
		t.Fatal(err)
	}
	if g := get(t, a, api.KindApp, "web").Metadata.Generation; g != 1 {
		t.Fatalf("App generation %d right after the dying write, want 1 (not rolled)", g)
	}
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		w, err := admission.Get(ctx, a, api.Key("p", api.KindApp, "web"))
		require.NoError(c, err)
		assert.Equal(c, int64(2), w.Metadata.Generation, "generation")
		assert.NotEqual(c, v1, w.Spec.PodTemplate().ConfigVersions["Config/conf"], "version of Config/conf")
	}, 30*time.Second, 100*time.Millisecond)
	t.Logf("rolled by the repair %v after the write", time.Since(start).Round(time.Millisecond))
}

// Deleting a used Config is refused, naming its users; forced, it goes,
// and its users keep the version they run.
func TestDeleteUsedConfig(t *testing.T) {
	_, a := secretRegion(t, nil)
	ctx := context.Background()
	alice := admission.Principal{Name: "alice"}
	if _, err := a.Submit(ctx, configDoc("conf", `{"level":"info"}`), alice); err != nil {
		t.Fatal(err)
	}
	env := `[{"name":"L","valueFrom":{"kind":"Config","name":"conf","key":"level"}}]`
	for _, n := range []string{"web", "api"} {
		if _, err := a.Submit(ctx, userDoc(api.KindApp, n, env, ""), alice); err != nil {
			t.Fatal(err)
		}
	}
	err := a.Delete(ctx, "p", api.KindConfig, "conf")
	var ae *admission.Error
	if !errors.As(err, &ae) || ae.Status != api.StatusConflict || !strings.Contains(ae.Body.Message, "App/api, App/web") {
		t.Fatalf("delete of a used Config: %v, want 409 naming App/api, App/web", err)
	}
	before := get(t, a, api.KindApp, "web").Spec.PodTemplate().ConfigVersions
	if err := a.DeleteRef(ctx, api.WorkloadRef{Project: "p", Kind: api.KindConfig, Name: "conf", Force: true}); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if err := admission.RepairKey(ctx, a, api.Key("p", api.KindApp, "web")); err != nil {
		t.Fatal(err)
	}
	after := get(t, a, api.KindApp, "web")
	if !cmp.Equal(before, after.Spec.PodTemplate().ConfigVersions) || after.Metadata.Generation != 1 {
		t.Errorf("after a forced delete: versions %v generation %d, want %v and 1", after.Spec.PodTemplate().ConfigVersions, after.Metadata.Generation, before)
	}
}

func get(t *testing.T, a *admission.Service, kind, name string) *api.Workload {
	t.Helper()
	w, err := admission.Get(context.Background(), a, api.Key("p", kind, name))
	if err != nil {
		t.Fatal(err)
	}
	return w
}
