package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

// TestRemovedFieldsLeaveTheClusters checks that an update which drops a
// field (an environment variable, a port) drops it from every shard: the
// propagator's server-side apply owns what it created. (The platform's
// identity variables are in every pod; they stay.)
func TestRemovedFieldsLeaveTheClusters(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	doc := func(extra string) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"fields","name":"svc"},
"spec":{"replicas":3,"template":{"containers":[{"name":"a","image":"nginx"%s}]}}}`, extra))
	}
	if _, err := cl.Submit(ctx, doc(`,"env":[{"name":"FEATURE","value":"on"}],"ports":[{"containerPort":8080}]`)); err != nil {
		t.Fatal(err)
	}
	key := api.Key("fields", api.KindApp, "svc")
	waitZones(t, key, map[string]int32{"a": 1, "b": 1, "c": 1}, "")
	if _, err := cl.Update(ctx, doc("")); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			d, err := c.Client.AppsV1().Deployments(api.Namespace("fields")).Get(ctx, "svc", metav1.GetOptions{})
			if !assert.NoError(ct, err) {
				return
			}
			// The platform's identity variables stay (api.IdentityEnv);
			// the user's FEATURE must go.
			ctr := d.Spec.Template.Spec.Containers[0]
			for _, e := range ctr.Env {
				if !api.IsIdentityEnv(e.Name) {
					ct.Errorf("%s still has env %s=%s", c.Name, e.Name, e.Value)
				}
			}
			if len(ctr.Ports) > 0 {
				ct.Errorf("%s still has ports %v", c.Name, ctr.Ports)
			}
		}
	}, 60*time.Second, 250*time.Millisecond)
}
