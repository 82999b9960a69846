package api_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// jobSetWithClaims is a JobSet of 4 indexes whose container mounts
// claim "data"; claims is the volumeClaimTemplates list's JSON.
func jobSetWithClaims(claims string) string {
	return `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"train"},
"spec":{"completions":4,"parallelism":2,"volumeClaimTemplates":` + claims + `,
"template":{"containers":[{"name":"a","image":"x:1","volumeMounts":[{"name":"data","mountPath":"/data"}]}],
"volumes":[{"name":"tmp","emptyDir":true,"sizeLimit":"1Gi"}]}}}`
}

// A JobSet's claim templates: a claim per index counts towards storage
// (with the scratch volume, per running pod), and the containers mount a
// claim by its name.
func TestJobSetClaimStorage(t *testing.T) {
	const gi = int64(1 << 30)
	tests := []struct {
		name, claims string
		want         int64
	}{
		{"one claim per index", `[{"name":"data","storage":"10Gi"}]`, 4*10*gi + 2*gi},
		{"two claims per index", `[{"name":"data","storage":"10Gi","storageClass":"fast","accessModes":["ReadWriteOncePod"]},{"name":"logs","storage":"1Gi"}]`, 4*11*gi + 2*gi},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fe := decodeAndValidate(jobSetWithClaims(tc.claims)); len(fe) > 0 {
				t.Fatalf("rejected: %v", fe)
			}
			w, err := api.Decode([]byte(jobSetWithClaims(tc.claims)))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			if got := api.DemandOf(w).StorageBytes; got != tc.want {
				t.Errorf("storage %d, want %d", got, tc.want)
			}
		})
	}
}

func TestJobSetClaimValidation(t *testing.T) {
	tests := []struct {
		name, claims string
		want         []string
	}{
		{"no claim for the mount", `[]`, []string{"spec.template.containers[a].volumeMounts[0].name"}},
		{"no storage", `[{"name":"data"}]`, []string{"spec.volumeClaimTemplates[0].storage"}},
		{"not a quantity", `[{"name":"data","storage":"lots"}]`, []string{"spec.volumeClaimTemplates[0].storage"}},
		{"zero", `[{"name":"data","storage":"0"}]`, []string{"spec.volumeClaimTemplates[0].storage"}},
		{"bad name", `[{"name":"data","storage":"1Gi"},{"name":"No_Good","storage":"1Gi"}]`, []string{"spec.volumeClaimTemplates[1].name"}},
		{"a volume's name", `[{"name":"data","storage":"1Gi"},{"name":"tmp","storage":"1Gi"}]`, []string{"spec.volumeClaimTemplates[1].name"}},
		{"twice", `[{"name":"data","storage":"1Gi"},{"name":"data","storage":"1Gi"}]`, []string{"spec.volumeClaimTemplates[1].name"}},
		{"bad class", `[{"name":"data","storage":"1Gi","storageClass":"Not A Class"}]`, []string{"spec.volumeClaimTemplates[0].storageClass"}},
		{"bad access mode", `[{"name":"data","storage":"1Gi","accessModes":["ReadWriteSometimes"]}]`, []string{"spec.volumeClaimTemplates[0].accessModes[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range decodeAndValidate(jobSetWithClaims(tc.claims)) {
				got = append(got, e.Field)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}
