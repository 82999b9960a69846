package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// claimApp is an App of replicas with claim templates claims (a JSON
// array), mounted by its container when mount is set, and extra spec
// fields.
func claimApp(kind, claims, mount, extra string) string {
	return `{"apiVersion":"atoll.dev/v1","kind":"` + kind + `","metadata":{"project":"p","name":"db"},
"spec":{` + extra + `"template":{"containers":[{"name":"a","image":"db:1"` + mount + `}],"volumeClaimTemplates":` + claims + `}}}`
}

// Claim templates are checked field by field, each problem a field error
// (a 422 through the gateway), and only the kinds that render them take them.
func TestClaimTemplateValidation(t *testing.T) {
	const mount = `,"volumeMounts":[{"name":"data","mountPath":"/data"}]`
	tests := []struct {
		name string
		doc  string
		want []string // "field code"
	}{
		{"good", claimApp("App", `[{"name":"data","storage":"1Gi","storageClass":"manual","accessModes":["ReadWriteOnce"]}]`, mount, ""), nil},
		{"good with Recreate", claimApp("App", `[{"name":"data","storage":"1Gi"}]`, mount, `"onZoneLoss":"Recreate",`), nil},
		{"no storage", claimApp("App", `[{"name":"data"}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[0].storage Required"}},
		{"storage not a quantity", claimApp("App", `[{"name":"data","storage":"lots"}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[0].storage Invalid"}},
		{"storage zero", claimApp("App", `[{"name":"data","storage":"0"}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[0].storage Invalid"}},
		{"bad name", claimApp("App", `[{"name":"Data_1","storage":"1Gi"}]`, "", ""),
			[]string{"spec.template.volumeClaimTemplates[0].name Invalid"}},
		{"no name", claimApp("App", `[{"storage":"1Gi"}]`, "", ""),
			[]string{"spec.template.volumeClaimTemplates[0].name Required"}},
		{"twice", claimApp("App", `[{"name":"data","storage":"1Gi"},{"name":"data","storage":"1Gi"}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[1].name Duplicate"}},
		{"bad class", claimApp("App", `[{"name":"data","storage":"1Gi","storageClass":"Fast!"}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[0].storageClass Invalid"}},
		{"bad access mode", claimApp("App", `[{"name":"data","storage":"1Gi","accessModes":["Everyone"]}]`, mount, ""),
			[]string{"spec.template.volumeClaimTemplates[0].accessModes[0] Unsupported"}},
		{"mount of no claim", claimApp("App", `[{"name":"logs","storage":"1Gi"}]`, mount, ""),
			[]string{"spec.template.containers[a].volumeMounts[0].name Invalid"}},
		{"bad zone loss policy", claimApp("App", `[{"name":"data","storage":"1Gi"}]`, mount, `"onZoneLoss":"Move",`),
			[]string{"spec.onZoneLoss Unsupported"}},
		{"zone loss policy without claims", claimApp("App", `[]`, "", `"onZoneLoss":"Wait",`),
			[]string{"spec.onZoneLoss Invalid"}},
		{"a kind without claims", claimApp("CronJob", `[{"name":"data","storage":"1Gi"}]`, mount, `"schedule":"* * * * *",`),
			[]string{"spec.template.volumeClaimTemplates Unsupported"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range decodeAndValidate(tc.doc) {
				got = append(got, e.Field+" "+e.Code)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("field errors (-want +got):\n%s", diff)
			}
		})
	}
}

// Every replica's claims count towards the storage quota, beside its
// scratch volumes.
func TestDemandCountsClaimTemplates(t *testing.T) {
	const gi = int64(1 << 30)
	doc := claimApp("App", `[{"name":"data","storage":"10Gi"},{"name":"wal","storage":"1Gi"}]`, "",
		`"replicas":3,`)
	w, err := api.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := api.Validate(w); len(fe) > 0 {
		t.Fatalf("rejected: %v", fe)
	}
	if got, want := api.DemandOf(w).StorageBytes, 3*11*gi; got != want {
		t.Errorf("storage %d, want %d", got, want)
	}
	if got := w.Spec.PodTemplate().VolumeClaimTemplates[0].AccessModes; !cmp.Equal(got, []string{api.AccessReadWriteOnce}) {
		t.Errorf("default access modes %v", got)
	}
	if !api.WaitsOnZoneLoss(w) {
		t.Error("an App with claims waits on zone loss by default")
	}
}

// A zone's ordinal range depends on its name only, and fits in an int32
// with room for MaxReplicas ordinals.
func TestOrdinalStart(t *testing.T) {
	for _, z := range []string{"a", "b", "c", "eu-west-1a", ""} {
		s := api.OrdinalStart(z)
		if s != api.OrdinalStart(z) || s < 0 || s%api.MaxReplicas != 0 || int64(s)+api.MaxReplicas > 1<<31-1 {
			t.Errorf("zone %q: start %d", z, s)
		}
	}
	if got := api.ClaimName("data", "db", 20001); got != "data-db-20001" {
		t.Errorf("claim name %q", got)
	}
}
