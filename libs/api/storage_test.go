package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// Requested storage counts towards quota: each scratch volume's size
// limit (DefaultScratchSize when unset) once per pod, and a Pod's claim.
func TestDemandCountsStorage(t *testing.T) {
	const gi = int64(1 << 30)
	tests := []struct {
		name string
		doc  string
		want int64
	}{
		{"no volumes", goodApp, 0},
		{"scratch with a size, per pod", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},
"spec":{"replicas":3,"template":{"containers":[{"name":"a","image":"x:1"}],"volumes":[{"name":"s","emptyDir":true,"sizeLimit":"2Gi"}]}}}`, 6 * gi},
		{"scratch without a size gets the default", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},
"spec":{"replicas":2,"template":{"containers":[{"name":"a","image":"x:1"}],"volumes":[{"name":"s","emptyDir":true}]}}}`, 2 * gi},
		{"a Pod's claim and scratch", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"db"},
"spec":{"volume":{"size":"10Gi","mountPath":"/data"},"template":{"containers":[{"name":"a","image":"db:1"}],"volumes":[{"name":"tmp","emptyDir":true,"sizeLimit":"512Mi"}]}}}`, 10*gi + gi/2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := api.Decode([]byte(tc.doc))
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

func TestScratchSizeLimitValidation(t *testing.T) {
	tests := []struct{ name, volume string }{
		{"not a quantity", `{"name":"s","emptyDir":true,"sizeLimit":"lots"}`},
		{"zero", `{"name":"s","emptyDir":true,"sizeLimit":"0"}`},
		{"negative", `{"name":"s","emptyDir":true,"sizeLimit":"-1Gi"}`},
		{"on a host path", `{"name":"s","hostPath":"/var","sizeLimit":"1Gi"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"web"},
"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"x:1"}],"volumes":[` + tc.volume + `]}}}`
			var fields []string
			for _, e := range decodeAndValidate(doc) {
				if e.Code == api.CodeInvalid {
					fields = append(fields, e.Field)
				}
			}
			if diff := cmp.Diff([]string{"spec.template.volumes[0].sizeLimit"}, fields); diff != "" {
				t.Errorf("invalid fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLedgerCheck(t *testing.T) {
	def := api.QuotaDefaults{Limits: map[api.Tier]api.Limit{
		api.TierOnDemand: {MilliCPU: new(int64(4000)), MemoryBytes: new(int64(1 << 30)), GPUs: new(int64(0)), Pods: new(int64(10)), StorageBytes: new(int64(1 << 30))},
	}}
	own := &api.Ledger{Project: "p", Limits: map[api.Tier]api.Limit{api.TierOnDemand: {GPUs: new(int64(2))}}}
	none := &api.Ledger{Project: "p"}
	od := func(d api.Demand) api.Demand { d.Tier = api.TierOnDemand; return d }
	tests := []struct {
		name       string
		l          *api.Ledger
		d, used, p api.Demand
		want       string // the resource refused, "" for none
	}{
		{"fits the default", none, od(api.Demand{MilliCPU: 4000, Pods: 10}), od(api.Demand{}), od(api.Demand{}), ""},
		{"default GPUs 0", none, od(api.Demand{GPUs: 1}), od(api.Demand{}), od(api.Demand{}), "nvidia.com/gpu"},
		{"own GPUs over the default", own, od(api.Demand{GPUs: 2}), od(api.Demand{}), od(api.Demand{}), ""},
		{"own limit keeps the default cpu", own, od(api.Demand{MilliCPU: 4001}), od(api.Demand{}), od(api.Demand{}), "cpu"},
		{"storage", none, od(api.Demand{StorageBytes: 1<<30 + 1}), od(api.Demand{}), od(api.Demand{}), "storage"},
		{"a tier with no default is forbidden", none, api.Demand{Tier: api.TierReserved, Pods: 1}, api.Demand{Tier: api.TierReserved}, api.Demand{Tier: api.TierReserved}, "pods"},
		{"not raised is not checked", none, od(api.Demand{Pods: 12}), od(api.Demand{Pods: 3}), od(api.Demand{Pods: 15}), ""},
		{"raised is checked", none, od(api.Demand{Pods: 8}), od(api.Demand{Pods: 3}), od(api.Demand{Pods: 7}), "pods"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if rej := tc.l.Check(tc.d, tc.used, tc.p, def); rej != nil {
				got = rej.Resource
			}
			if got != tc.want {
				t.Errorf("refused %q, want %q", got, tc.want)
			}
		})
	}
}
