package api

import (
	"strings"
	"testing"
)

// Every project CheckProject accepts has a namespace that is a DNS label
// and none of the platform's; every refused one names why.
func TestCheckProject(t *testing.T) {
	tests := []struct {
		project string
		ok      bool
		reason  string // a part of the reason when refused
	}{
		{"shop", true, ""},
		{"a", true, ""},
		{strings.Repeat("a", MaxProjectLen), true, ""},
		{"systems", true, ""},
		{"my-kube-lab", true, ""},
		{"", false, "required"},
		{strings.Repeat("a", MaxProjectLen+1), false, "at most 57"},
		{strings.Repeat("a", 64), false, "at most 57"},
		{"system", false, "reserved"},
		{"default", false, "reserved"},
		{"platform", false, "reserved"},
		{"kube-system", false, "reserved"},
		{"atoll-system", false, "reserved"},
		{"Shop", false, "DNS label"},
		{"-shop", false, "DNS label"},
		{"shop_1", false, "DNS label"},
	}
	for _, tc := range tests {
		t.Run(tc.project, func(t *testing.T) {
			code, reason, ok := CheckProject(tc.project)
			if ok != tc.ok || !strings.Contains(reason, tc.reason) {
				t.Fatalf("CheckProject(%q) = %q, %q, %v; want ok %v and a reason with %q", tc.project, code, reason, ok, tc.ok, tc.reason)
			}
			if ok && (!IsDNSLabel(Namespace(tc.project)) || Namespace(tc.project) == "atoll-system") {
				t.Errorf("accepted project %q has namespace %q", tc.project, Namespace(tc.project))
			}
		})
	}
}

// A workload in a reserved or too long project is refused naming
// metadata.project; an operation naming one, naming project.
func TestValidateRefusesPlatformProjects(t *testing.T) {
	for _, p := range []string{"system", strings.Repeat("p", 64)} {
		w := &Workload{APIVersion: APIVersion, Kind: KindApp, Metadata: Metadata{Project: p, Name: "web"}}
		if fe := Validate(w); !hasField(fe, "metadata.project") {
			t.Errorf("workload in project %q: %v, want an error on metadata.project", p, fe)
		}
		o := &Operation{Project: p, Kind: KindApp, Name: "web", Op: OpPause}
		if fe := o.Validate(); !hasField(fe, "project") {
			t.Errorf("operation in project %q: %v, want an error on project", p, fe)
		}
	}
}

func hasField(fe FieldErrors, field string) bool {
	for _, f := range fe {
		if f.Field == field {
			return true
		}
	}
	return false
}
