package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"atoll.dev/libs/api"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// TestContractKindEnum: the contract's kind enum is exactly the registered
// kinds: a kind added to api and not to openapi.yaml fails here.
func TestContractKindEnum(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(computeapi.SpecYAML)
	if err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["WorkloadDocument"].Value.Properties["kind"].Value.Enum {
		enum = append(enum, v.(string))
	}
	if diff := cmp.Diff(api.KindNames(), enum); diff != "" {
		t.Errorf("openapi.yaml WorkloadDocument.kind enum (-api.KindNames +enum):\n%s", diff)
	}
	var generated []string
	for _, k := range api.KindNames() {
		if computeapi.WorkloadDocumentKind(k).Valid() {
			generated = append(generated, k)
		}
	}
	if diff := cmp.Diff(api.KindNames(), generated); diff != "" {
		t.Errorf("generated WorkloadDocumentKind constants (-api.KindNames +valid):\n%s", diff)
	}
}

// TestListKinds: GET /v1/kinds lists every registered kind, sorted, with
// its URL segment and what applies to it, for any signed-in caller.
func TestListKinds(t *testing.T) {
	g := newTestGateway(t, gateway.Config{})
	viewer, _ := g.GW.Auth().Mint(auth.Identity{Subject: "ann", Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	resp, body := g.do(t, http.MethodGet, "/v1/kinds", viewer, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/kinds: %d %s", resp.StatusCode, body)
	}
	var got computeapi.KindList
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	var want []computeapi.KindInfo
	for _, k := range api.Kinds() {
		want = append(want, computeapi.KindInfo{Name: k.Name, Path: strings.ToLower(k.Name), Placed: api.Placed(k.Name),
			AdminOnly: k.AdminOnly, EveryCluster: k.EveryCluster, Pods: !k.NoPods, Ops: k.Ops})
	}
	if diff := cmp.Diff(want, got.Items, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	// What clients rely on, spelled out.
	byName := map[string]computeapi.KindInfo{}
	for _, k := range got.Items {
		byName[k.Name] = k
	}
	if s := byName[api.KindScaler]; s.Pods || s.Placed || slices.Contains(s.Ops, api.OpRestart) || slices.Contains(s.Ops, api.OpStop) || s.Path != "scaler" {
		t.Errorf("Scaler %+v: want no pods, not placed, no restart or stop, path scaler", s)
	}
	if p := byName[api.KindPod]; slices.Contains(p.Ops, api.OpScale) || slices.Contains(p.Ops, api.OpPause) || !p.Pods {
		t.Errorf("Pod %+v: want pods, no scale, no pause", p)
	}
	if d := byName[api.KindDaemon]; !d.AdminOnly || !d.EveryCluster {
		t.Errorf("Daemon %+v: want adminOnly, everyCluster", d)
	}
	if resp, _ := g.do(t, http.MethodGet, "/v1/kinds", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/kinds without a token: %d, want 401", resp.StatusCode)
	}
}
