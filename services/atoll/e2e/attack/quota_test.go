package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/quota"
)

// quotaCall sends one Compute API request and returns the status and body.
func quotaCall(t *testing.T, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, reg.GatewayURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// quotaRevisions are the revisions of project's keys that a submit of
// workload key would write (its workload, its reservation, the project's
// ledger), 0 for a key that does not exist: unchanged means nothing was
// written.
func quotaRevisions(t *testing.T, project, key string) [3]uint64 {
	t.Helper()
	ctx := context.Background()
	var out [3]uint64
	for i, k := range []struct{ bucket, key string }{
		{bus.BucketWorkloads, key},
		{bus.BucketQuota, api.QuotaReservationKey(project, key)},
		{bus.BucketQuota, api.QuotaProjectKey(project)},
	} {
		kv, err := reg.Bus.KV(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, k.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			t.Fatal(err)
		default:
			out[i] = e.Revision()
		}
	}
	return out
}

// Quota denies by default: a project nobody gave a quota gets the
// region's default (finite, never "unlimited"), and a GPU asked for
// where the GPU cap is 0 is refused with 409 QuotaExceeded naming
// nvidia.com/gpu and limit 0, with nothing written anywhere.
func TestQuotaDeniesByDefault(t *testing.T) {
	e2e.Need(t)
	project := fmt.Sprintf("quota-deny-%d", time.Now().UnixNano()%1_000_000)
	dev := reg.Token("attack-quota-dev", false, map[string]string{project: "developer"})

	// A new project, no entry: the region's default, every tier.
	code, body := quotaCall(t, http.MethodGet, "/v1/projects/"+project+"/quota", dev, nil)
	var q computeapi.Quota
	if code != http.StatusOK || json.Unmarshal(body, &q) != nil {
		t.Fatalf("quota of a new project: %d %s", code, body)
	}
	def := quota.Ample().Defaults // the test region's policy (region.Options.Quota unset)
	if q.MaxWorkloads != def.MaxWorkloads || q.Workloads != 0 || len(q.Tiers) != len(api.Tiers) {
		t.Errorf("new project's quota %+v: want %d tiers, 0 of %d workloads", q, len(api.Tiers), def.MaxWorkloads)
	}
	for _, tq := range q.Tiers {
		c := def.Resolve(api.Tier(tq.Tier), nil)
		want := computeapi.Resources{MilliCPU: c.MilliCPU, MemoryBytes: c.MemoryBytes, Gpus: c.GPUs, Pods: c.Pods, StorageBytes: c.StorageBytes}
		if !tq.Default || tq.Limit != want {
			t.Errorf("tier %s: default %v, limit %+v; want the region's default %+v", tq.Tier, tq.Default, tq.Limit, want)
		}
	}

	// GPUs forbidden: an explicit 0 (a platform admin's), the rest default.
	code, body = quotaCall(t, http.MethodPut, "/v1/projects/"+project+"/quota/OnDemand", reg.AdminToken, []byte(`{"gpus":0}`))
	if code != http.StatusOK {
		t.Fatalf("set GPUs 0: %d %s", code, body)
	}
	// Nor may a developer lift it.
	if code, body := quotaCall(t, http.MethodPut, "/v1/projects/"+project+"/quota/OnDemand", dev, []byte(`{"gpus":8}`)); code != http.StatusForbidden {
		t.Errorf("a developer set quota: %d %s, want 403", code, body)
	}

	key := api.Key(project, "App", "gpu")
	before := quotaRevisions(t, project, key)
	app := []byte(`{"kind":"App","metadata":{"name":"gpu"},"spec":{"replicas":1,"template":{"containers":[{"name":"train","image":"trainer:1",
"resources":{"requests":{"cpu":"1","memory":"1Gi","nvidia.com/gpu":1}}}]}}}`)
	code, body = quotaCall(t, http.MethodPost, "/v1/projects/"+project+"/workloads", dev, app)
	var e computeapi.Error
	if code != http.StatusConflict || json.Unmarshal(body, &e) != nil || e.Code != "QuotaExceeded" || e.Quota == nil ||
		e.Quota.Resource != api.ResourceGPUName || e.Quota.Limit != 0 || e.Quota.Requested != 1 {
		t.Errorf("a GPU with GPU quota 0: %d %s; want 409 QuotaExceeded on nvidia.com/gpu, limit 0", code, body)
	}

	// Nothing written: no workload, no reservation, no object anywhere.
	if after := quotaRevisions(t, project, key); after != before || after[0] != 0 || after[1] != 0 {
		t.Errorf("revisions of the workload, its reservation and the ledger %v, then %v: something was written", before, after)
	}
	if w, err := cl.Workload(context.Background(), key); err != nil || w != nil {
		t.Errorf("the refused workload: %+v, %v; want none", w, err)
	}
	for _, c := range reg.Env.Clusters {
		ds, err := c.Client.AppsV1().Deployments(api.Namespace(project)).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if len(ds.Items) > 0 {
			t.Errorf("%s holds %d Deployments of the refused project", c.Name, len(ds.Items))
		}
	}
}
