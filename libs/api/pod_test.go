package api_test

import (
	"fmt"
	"testing"

	"atoll.dev/libs/api"
)

// TestPodVolumeValidation: a Pod's volume needs a positive size and a
// clean absolute mount path; its class may be unset, empty or a name.
func TestPodVolumeValidation(t *testing.T) {
	tests := []struct {
		name   string
		volume string
		field  string // "" when valid
		code   string
	}{
		{"valid", `{"size":"1Gi","storageClassName":"fast.ssd","mountPath":"/data"}`, "", ""},
		{"empty class", `{"size":"1Gi","storageClassName":"","mountPath":"/data"}`, "", ""},
		{"default class", `{"size":"500Mi","mountPath":"/var/lib/db"}`, "", ""},
		{"no size", `{"mountPath":"/data"}`, "spec.volume.size", api.CodeRequired},
		{"bad size", `{"size":"lots","mountPath":"/data"}`, "spec.volume.size", api.CodeInvalid},
		{"zero size", `{"size":"0","mountPath":"/data"}`, "spec.volume.size", api.CodeInvalid},
		{"bad class", `{"size":"1Gi","storageClassName":"Fast_SSD","mountPath":"/data"}`, "spec.volume.storageClassName", api.CodeInvalid},
		{"no mount path", `{"size":"1Gi"}`, "spec.volume.mountPath", api.CodeRequired},
		{"relative mount path", `{"size":"1Gi","mountPath":"data"}`, "spec.volume.mountPath", api.CodeInvalid},
		{"unclean mount path", `{"size":"1Gi","mountPath":"/data/../etc"}`, "spec.volume.mountPath", api.CodeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"db"},
"spec":{"volume":%s,"template":{"containers":[{"name":"a","image":"db:1"}]}}}`, tc.volume)
			fe := decodeAndValidate(doc)
			if tc.field == "" {
				if len(fe) > 0 {
					t.Fatalf("rejected: %v", fe)
				}
				return
			}
			for _, e := range fe {
				if e.Field == tc.field && e.Code == tc.code && e.Reason != "" {
					return
				}
			}
			t.Errorf("errors %+v lack field %q code %q", fe, tc.field, tc.code)
		})
	}
	// The claim's volume name is the platform's.
	doc := `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"db"},
"spec":{"volume":{"size":"1Gi","mountPath":"/data"},"template":{"containers":[{"name":"a","image":"db:1"}],"volumes":[{"name":"atoll-data","emptyDir":true}]}}}`
	found := false
	for _, e := range decodeAndValidate(doc) {
		found = found || e.Field == "spec.volume" && e.Code == api.CodeDuplicate
	}
	if !found {
		t.Error("a template volume named atoll-data is accepted beside spec.volume")
	}
	if got := api.PodClaimName("db", "zone-a"); got != "db-data-zone-a" {
		t.Errorf("PodClaimName = %q", got)
	}
}
