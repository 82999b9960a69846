package api_test

import (
	"testing"

	"atoll.dev/libs/api"
)

// A JobSet's claim templates: a claim per index counts towards storage
// (the scratch volume per running pod), whatever the parallelism.
func TestJobSetClaimStorage(t *testing.T) {
	const gi = int64(1 << 30)
	tests := []struct {
		name, spec string
		want       int64
	}{
		{"a claim per index", `"completions":4,"parallelism":2,"template":{"volumeClaimTemplates":[{"name":"data","storage":"10Gi"}],`, 4*10*gi + 2*gi},
		{"two claims per index, all at once", `"completions":3,"parallelism":3,"template":{"volumeClaimTemplates":[{"name":"data","storage":"10Gi"},{"name":"logs","storage":"1Gi"}],`, 3*11*gi + 3*gi},
		{"no claims", `"completions":4,"parallelism":2,"template":{`, 2 * gi},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"train"},"spec":{` + tc.spec + `
"containers":[{"name":"a","image":"x:1","volumeMounts":[{"name":"tmp","mountPath":"/tmp"}]}],"volumes":[{"name":"tmp","emptyDir":true,"sizeLimit":"1Gi"}]}}}`
			w, err := api.Decode([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			if fe := api.Validate(w); len(fe) > 0 {
				t.Fatalf("rejected: %v", fe)
			}
			if got := api.DemandOf(w).StorageBytes; got != tc.want {
				t.Errorf("storage %d, want %d", got, tc.want)
			}
		})
	}
}
