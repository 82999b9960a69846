package cli

import (
	"bytes"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
)

// TestDescribeConfigVersions: describe names, per Config and Secret an
// App uses, the version its template rolls to and the versions its pods
// run per zone (two while a change rolls through zone b, none yet in
// zone c); an App that names none shows nothing.
func TestDescribeConfigVersions(t *testing.T) {
	w := computeapi.Workload{Kind: api.KindApp, Metadata: computeapi.Metadata{Name: "web"}, Status: computeapi.WorkloadStatus{
		Phase:          api.PhaseProgressing,
		ConfigVersions: map[string]string{"Config/web-conf": "v2", "Secret/web-db": "d1"},
		Zones: map[string]computeapi.Counts{
			"a": {Desired: 1, ConfigVersions: map[string][]string{"Config/web-conf": {"v2"}, "Secret/web-db": {"d1"}}},
			"b": {Desired: 1, ConfigVersions: map[string][]string{"Config/web-conf": {"v1", "v2"}, "Secret/web-db": {"d1"}}},
			"c": {Desired: 1},
		}}}
	var out bytes.Buffer
	describeConfigVersions(&out, w)
	want := `
Config versions:
NAME TEMPLATE ZONE a ZONE b ZONE c
Config/web-conf v2 v2 v1,v2 -
Secret/web-db d1 d1 d1 -
`
	if got := squeeze(out.String()); got != squeeze(want) {
		t.Errorf("describe:\n%s\nwant:\n%s", got, squeeze(want))
	}
	out.Reset()
	describeConfigVersions(&out, computeapi.Workload{Kind: api.KindApp, Status: computeapi.WorkloadStatus{Zones: map[string]computeapi.Counts{"a": {Desired: 1}}}})
	if out.Len() > 0 {
		t.Errorf("describe of an App without Configs: %q", out.String())
	}
}
