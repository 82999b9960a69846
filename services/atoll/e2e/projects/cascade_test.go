package projects

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/admission"
	"atoll.dev/services/atoll/e2e"
)

// projectKeys returns, per bucket of the region, the keys that name
// project (one of their dot-separated tokens is the project's name).
func projectKeys(ctx context.Context, t *testing.T, project string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range bus.DefaultTopology(1).Buckets {
		kv, err := reg.Bus.KV(ctx, b.Bucket)
		require.NoError(t, err, "bucket %s", b.Bucket)
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrNoKeysFound, "keys of %s", b.Bucket)
			continue
		}
		for k := range lister.Keys() {
			if slices.Contains(strings.Split(k, "."), project) {
				out[b.Bucket] = append(out[b.Bucket], k)
			}
		}
	}
	return out
}

// TestProjectDeleteCascade: a project holding an App, a JobSet, a
// CronJob, a Config, a token, a quota request and events credentials is
// refused deletion, naming its workloads; with cascade it is deleted with
// everything it held: no key naming it in any bucket, no namespace of it
// in any member cluster, no durable consumer of its events, its token
// refused.
func TestProjectDeleteCascade(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const project = "doomed"
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	alice := client(t, reg.GatewayURL, reg.Token("alice", false, nil))
	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: project, Owner: "alice"})
	require.NoError(t, err)
	_, err = alice.SetMember(ctx, project, "user", "bob", "developer")
	require.NoError(t, err)
	tok, err := alice.CreateToken(ctx, project, "ci", "developer", time.Hour)
	require.NoError(t, err)
	_, err = alice.RequestQuota(ctx, project, computeapi.QuotaRequestCreate{Tier: "OnDemand", Cpu: "4", Reason: "more"})
	require.NoError(t, err, "a quota request")
	cred, err := alice.CreateEventCredentials(ctx, project, api.EventCredentialRequest{Name: "sub"})
	require.NoError(t, err, "events credentials")
	_, err = reg.Bus.JS.PushConsumer(ctx, bus.StreamEvents, cred.Consumer)
	require.NoError(t, err, "the credentials' durable consumer")
	docs := map[string]string{
		"App": string(appDoc("web")),
		"JobSet": `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"name":"render"},"spec":{"parallelism":1,"completions":2,
"template":{"containers":[{"name":"work","image":"busybox","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		"CronJob": `{"apiVersion":"atoll.dev/v1","kind":"CronJob","metadata":{"name":"tick"},"spec":{"schedule":"* * * * *",
"template":{"containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`,
		"Config": `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"name":"settings"},"spec":{"data":{"mode":"on"}}}`,
	}
	byToken := client(t, reg.GatewayURL, tok.Secret)
	for kind, doc := range docs {
		_, err := byToken.CreateWorkloadJSON(ctx, project, []byte(doc), "")
		require.NoError(t, err, "create the %s", kind)
	}
	// The workloads are propagated: the project's namespace holds them.
	for _, c := range reg.Env.Clusters {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			deps, err := c.Client.AppsV1().Deployments(api.Namespace(project)).List(ctx, metav1.ListOptions{})
			if assert.NoError(ct, err) {
				assert.NotEmpty(ct, deps.Items)
			}
		}, time.Minute, 250*time.Millisecond, "the App in %s", c.Name)
	}

	err = alice.DeleteProject(ctx, project)
	var se *sdk.Error
	require.ErrorAs(t, err, &se, "deleting a project with workloads")
	assert.Equal(t, 409, se.Status)
	assert.Equal(t, "NotEmpty", se.Body.Code)
	for _, name := range []string{"App/web", "JobSet/render", "CronJob/tick", "Config/settings"} {
		assert.Contains(t, se.Body.Message, name, "the refusal names what the project holds")
	}
	before := projectKeys(ctx, t, project)
	assert.NotEmpty(t, before[bus.BucketWorkloads], "the workloads before")
	assert.NotEmpty(t, before[bus.BucketProjects], "the project and its token before")

	start := time.Now()
	require.NoError(t, alice.DeleteProjectCascade(ctx, project))
	_, err = byToken.CreateWorkloadJSON(ctx, project, appDoc("late"), "")
	// 409 while the project is deleting, 401 once its token went with it.
	assert.Contains(t, []int{401, 409}, status(err), "a create in a deleting project: %v", err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := admin.Project(ctx, project)
		assert.True(c, sdk.IsNotFound(err), "the project after its deletion: %v", err)
	}, time.Minute, 100*time.Millisecond, "the project is deleted")
	t.Logf("project %s deleted with cascade in %s", project, time.Since(start).Round(time.Millisecond))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		left := projectKeys(ctx, t, project)
		assert.Empty(c, left, "keys naming %s left in the buckets", project)
		for _, cl := range reg.Env.Clusters {
			ns, err := cl.Client.CoreV1().Namespaces().Get(ctx, api.Namespace(project), metav1.GetOptions{})
			if !assert.True(c, apierrors.IsNotFound(err), "namespace %s in %s: %v", api.Namespace(project), cl.Name, err) && err == nil {
				c.Errorf("namespace %s in %s is %s", ns.Name, cl.Name, ns.Status.Phase)
			}
		}
		_, err := reg.Bus.JS.PushConsumer(ctx, bus.StreamEvents, cred.Consumer)
		assert.ErrorIs(c, err, jetstream.ErrConsumerNotFound, "the events credentials' durable consumer")
	}, 2*time.Minute, time.Second, "nothing of the project is left")
	assert.Equal(t, 401, listStatus(ctx, byToken, project), "the project's token after its deletion")
}

// TestProjectDeletionResumes: a project marked deleting whose deletion
// never ran (admission died right after the mark: the test writes the
// mark itself) is finished by the repair leader, with nothing left.
func TestProjectDeletionResumes(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const project = "orphaned"
	admin := client(t, reg.GatewayURL, reg.AdminToken)
	_, err := admin.CreateProject(ctx, computeapi.ProjectCreate{Name: project, Owner: "alice"})
	require.NoError(t, err)
	_, err = admin.CreateWorkloadJSON(ctx, project, appDoc("web"), "")
	require.NoError(t, err)

	kv, err := reg.Bus.KV(ctx, bus.BucketProjects)
	require.NoError(t, err)
	e, err := kv.Get(ctx, api.ProjectKey(project))
	require.NoError(t, err)
	var doc api.ProjectDoc
	require.NoError(t, json.Unmarshal(e.Value(), &doc))
	doc.Deleting = &api.ProjectDeletion{Started: time.Now().UTC(), By: "alice"}
	b, err := json.Marshal(&doc)
	require.NoError(t, err)
	_, err = kv.Update(ctx, api.ProjectKey(project), b, e.Revision())
	require.NoError(t, err)
	marked := time.Now()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := admin.Project(ctx, project)
		assert.True(c, sdk.IsNotFound(err), "the project: %v", err)
		assert.Empty(c, projectKeys(ctx, t, project), "keys naming %s left in the buckets", project)
	}, 3*admission.DeletionRetry, 250*time.Millisecond, "the repair leader finishes the deletion")
	t.Logf("a deletion marked but never run was finished %s after the mark", time.Since(marked).Round(time.Millisecond))
}
