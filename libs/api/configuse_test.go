package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// appWith is an App document whose one container has the given env and
// envFrom (JSON arrays, or "" for none) and the template the given volumes.
func appWith(env, envFrom, volumes string) string {
	c := `{"name":"a","image":"x:1"`
	if env != "" {
		c += `,"env":` + env
	}
	if envFrom != "" {
		c += `,"envFrom":` + envFrom
	}
	c += `}`
	t := `{"containers":[` + c + `]`
	if volumes != "" {
		t += `,"volumes":` + volumes
	}
	return `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},"spec":{"replicas":1,"template":` + t + `}}}`
}

func TestConfigReferenceValidation(t *testing.T) {
	tests := []struct {
		name                 string
		env, envFrom, volume string
		want                 []string // fields with an error
	}{
		{name: "every kind of reference", env: `[{"name":"A","valueFrom":{"kind":"Config","name":"conf","key":"a"}}]`,
			envFrom: `[{"kind":"Secret","name":"creds","prefix":"DB_"}]`,
			volume:  `[{"name":"c","config":{"name":"conf","items":[{"key":"a","path":"dir/a.txt"}],"defaultMode":420}},{"name":"s","secret":{"name":"creds"}}]`},
		{name: "value and valueFrom", env: `[{"name":"A","value":"x","valueFrom":{"kind":"Config","name":"conf","key":"a"}}]`,
			want: []string{"spec.template.containers[0].env[0].value"}},
		{name: "unknown kind", env: `[{"name":"A","valueFrom":{"kind":"Volume","name":"conf","key":"a"}}]`,
			want: []string{"spec.template.containers[0].env[0].valueFrom.kind"}},
		{name: "no key", env: `[{"name":"A","valueFrom":{"kind":"Config","name":"conf"}}]`,
			want: []string{"spec.template.containers[0].env[0].valueFrom.key"}},
		{name: "bad key", env: `[{"name":"A","valueFrom":{"kind":"Config","name":"conf","key":"a/b"}}]`,
			want: []string{"spec.template.containers[0].env[0].valueFrom.a/b"}},
		{name: "envFrom without a name", envFrom: `[{"kind":"Config"}]`,
			want: []string{"spec.template.containers[0].envFrom[0].name"}},
		{name: "envFrom bad prefix", envFrom: `[{"kind":"Config","name":"conf","prefix":"1X"}]`,
			want: []string{"spec.template.containers[0].envFrom[0].prefix"}},
		{name: "two sources", volume: `[{"name":"c","emptyDir":true,"config":{"name":"conf"}}]`,
			want: []string{"spec.template.volumes[0]"}},
		{name: "path escapes", volume: `[{"name":"c","secret":{"name":"s","items":[{"key":"k","path":"../k"}]}}]`,
			want: []string{"spec.template.volumes[0].secret.items[0].path"}},
		{name: "absolute path", volume: `[{"name":"c","config":{"name":"conf","items":[{"key":"k","path":"/k"}]}}]`,
			want: []string{"spec.template.volumes[0].config.items[0].path"}},
		{name: "bad mode", volume: `[{"name":"c","config":{"name":"conf","defaultMode":4096}}]`,
			want: []string{"spec.template.volumes[0].config.defaultMode"}},
		{name: "bad volume name", volume: `[{"name":"c","config":{"name":"Conf"}}]`,
			want: []string{"spec.template.volumes[0].config.name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range decodeAndValidate(appWith(tc.env, tc.envFrom, tc.volume)) {
				got = append(got, e.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fields with errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTemplateRefs(t *testing.T) {
	w, err := api.Decode([]byte(appWith(
		`[{"name":"A","valueFrom":{"kind":"Config","name":"conf","key":"a","optional":true,"rolloutOnChange":false}}]`,
		`[{"kind":"Secret","name":"creds"}]`,
		`[{"name":"c","config":{"name":"conf","items":[{"key":"b","path":"b"}]}},{"name":"t","emptyDir":true}]`)))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := w.Spec.PodTemplate()
	f := false
	wantUses := []api.ConfigUse{
		{Field: "spec.template.containers[0].env[0].valueFrom", Ref: api.ConfigRef{Kind: "Config", Name: "conf", Optional: true, RolloutOnChange: &f}, Keys: []string{"a"}},
		{Field: "spec.template.containers[0].envFrom[0]", Ref: api.ConfigRef{Kind: "Secret", Name: "creds"}},
		{Field: "spec.template.volumes[0].config", Ref: api.ConfigRef{Kind: "Config", Name: "conf"}, Keys: []string{"b"}},
	}
	if diff := cmp.Diff(wantUses, tmpl.Uses("spec.template")); diff != "" {
		t.Errorf("uses (-want +got):\n%s", diff)
	}
	// conf: required (the volume's use is) and rolled (the volume's is).
	wantRefs := []api.ConfigRef{{Kind: "Config", Name: "conf"}, {Kind: "Secret", Name: "creds"}}
	if diff := cmp.Diff(wantRefs, tmpl.Refs()); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	if tmpl.Volumes[0].Scratch() || !tmpl.Volumes[1].Scratch() {
		t.Errorf("a config volume is not scratch, an emptyDir is: %v %v", tmpl.Volumes[0].Scratch(), tmpl.Volumes[1].Scratch())
	}
}

func TestConfigContentHash(t *testing.T) {
	a := api.ConfigSpec{Data: map[string]string{"k": "v"}, Files: map[string]string{"f": "body"}}
	b := api.ConfigSpec{Data: map[string]string{"k": "v", "f": "body"}}
	c := api.ConfigSpec{Data: map[string]string{"k": "w"}, Files: map[string]string{"f": "body"}}
	if a.ContentHash() != b.ContentHash() {
		t.Error("the same keys and values as data or files hash differently")
	}
	if a.ContentHash() == c.ContentHash() {
		t.Error("a changed value keeps its hash")
	}
}
