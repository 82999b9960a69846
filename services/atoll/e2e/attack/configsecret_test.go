package attack

// Configs and Secrets across the tenant boundary: a developer of project
// a tries to read project b's Secret and Config and to make its workloads
// read them; a viewer tries to create one; every read of a Secret, by
// anyone, is searched for its value; and a workload tries to reach a
// Secret's files through a host path, a projected volume or a path out of
// its mount. Each gets the documented refusal, and a refused write leaves
// the workloads bucket and the member clusters unchanged.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

// csSecret is a Secret document holding PASSWORD=value.
func csSecret(name, value string) []byte {
	return fmt.Appendf(nil, `{"kind":"Secret","metadata":{"name":%q},"spec":{"data":{"PASSWORD":%q}}}`, name, value)
}

// csConfig is a Config document holding LEVEL=value.
func csConfig(name, value string) []byte {
	return fmt.Appendf(nil, `{"kind":"Config","metadata":{"name":%q},"spec":{"data":{"LEVEL":%q}}}`, name, value)
}

// csApp is an App whose container has env (a JSON list) and whose
// template has volumes (a JSON list) mounted at /secret.
func csApp(name, env, volumes string) []byte {
	mounts := ""
	if volumes != "[]" {
		mounts = `,"volumeMounts":[{"name":"s","mountPath":"/secret"}]`
	}
	return fmt.Appendf(nil, `{"kind":"App","metadata":{"name":%q},"spec":{"replicas":1,"template":{"volumes":%s,
"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"8Mi"}},"env":%s%s}]}}}`,
		name, volumes, env, mounts)
}

// TestConfigSecretEscapesAreRefused: see the file's comment.
func TestConfigSecretEscapesAreRefused(t *testing.T) {
	e2e.Need(t)
	const a, b = "attack-cs-a", "attack-cs-b"
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	value := "attack-secret-" + hex.EncodeToString(raw[:])
	devA := podsProject(t, a)
	devB := podsProject(t, b)
	viewerA := reg.Token("attack-cs-viewer", false, map[string]string{a: "viewer"})

	// Project b's Secret and Config, written by b's developer.
	for _, doc := range [][]byte{csSecret("db", value), csConfig("conf", "info")} {
		status, body := podsRequest(t, http.MethodPost, "/v1/projects/"+b+"/workloads", devB, doc)
		require.Equal(t, http.StatusCreated, status, "%s", body)
		assert.NotContains(t, string(body), value, "the create reply holds the value")
	}

	// A named object of another project is not found (its existence is
	// not told); a list of it is forbidden.
	t.Run("reads of another project's", func(t *testing.T) {
		for _, r := range []struct {
			path   string
			status int
		}{
			{"/v1/projects/" + b + "/workloads/Secret/db", http.StatusNotFound},
			{"/v1/projects/" + b + "/workloads/Config/conf", http.StatusNotFound},
			{"/v1/projects/" + b + "/workloads/Secret/db/events", http.StatusNotFound},
			{"/v1/projects/" + b + "/workloads?kind=Secret", http.StatusForbidden},
			{"/v1/projects/" + b + "/workloads", http.StatusForbidden},
		} {
			status, body := podsRequest(t, http.MethodGet, r.path, devA, nil)
			assert.Equal(t, r.status, status, "GET %s: %s", r.path, body)
			assert.NotContains(t, string(body), value, "GET %s", r.path)
			assert.NotContains(t, string(body), `"LEVEL"`, "GET %s", r.path)
		}
	})

	// Writes refused: project, status, the field named (a suffix; "" for
	// a refusal that names none).
	tests := []struct {
		name, project, token string
		doc                  []byte
		status               int
		field                string
	}{
		{"a's App reads b's Secret by its name", a, devA,
			csApp("steal-env", `[{"name":"P","valueFrom":{"kind":"Secret","name":"db","key":"PASSWORD"}}]`, `[]`),
			http.StatusUnprocessableEntity, "env[0].valueFrom.name"},
		{"a's App mounts b's Secret by its name", a, devA,
			csApp("steal-vol", `[]`, `[{"name":"s","secret":{"name":"db"}}]`),
			http.StatusUnprocessableEntity, "volumes[0].secret.name"},
		{"a's App reads b's Config by its name", a, devA,
			csApp("steal-conf", `[{"name":"L","valueFrom":{"kind":"Config","name":"conf","key":"LEVEL"}}]`, `[]`),
			http.StatusUnprocessableEntity, "env[0].valueFrom.name"},
		{"a's App names b's Secret by a path", a, devA,
			csApp("steal-path", `[{"name":"P","valueFrom":{"kind":"Secret","name":"../`+b+`/db","key":"PASSWORD"}}]`, `[]`),
			http.StatusUnprocessableEntity, "env[0].valueFrom.name"},
		{"a's developer writes an App into b", b, devA,
			csApp("steal-into", `[{"name":"P","valueFrom":{"kind":"Secret","name":"db","key":"PASSWORD"}}]`, `[]`),
			http.StatusForbidden, ""},
		{"a viewer creates a Secret", a, viewerA, csSecret("viewer-secret", value), http.StatusForbidden, ""},
		{"a viewer creates a Config", a, viewerA, csConfig("viewer-conf", "x"), http.StatusForbidden, ""},
		{"b's App mounts the node's kubelet directory", b, devB,
			csApp("hostpath", `[]`, `[{"name":"s","hostPath":"/var/lib/kubelet/pods"}]`),
			http.StatusForbidden, "volumes[0].hostPath"},
		{"b's App mounts its Secret and a host path in one volume", b, devB,
			csApp("hostpath-secret", `[]`, `[{"name":"s","hostPath":"/etc","secret":{"name":"db"}}]`),
			http.StatusForbidden, "volumes[0].hostPath"},
		{"b's App mounts a projected volume (no such field)", b, devB,
			csApp("projected", `[]`, `[{"name":"s","projected":{"sources":[{"secret":{"name":"db"}}]}}]`),
			http.StatusBadRequest, "projected"},
		{"b's App writes a Secret's key out of its mount", b, devB,
			csApp("traversal", `[]`, `[{"name":"s","secret":{"name":"db","items":[{"key":"PASSWORD","path":"../../etc/passwd"}]}}]`),
			http.StatusUnprocessableEntity, "volumes[0].secret.items[0].path"},
		{"b's App mounts a cluster Secret Atoll did not make", b, devB,
			csApp("cluster-secret", `[]`, `[{"name":"s","secret":{"name":"default-token"}}]`),
			http.StatusUnprocessableEntity, "volumes[0].secret.name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev, keys := workloadsRevision(t)
			status, body := podsRequest(t, http.MethodPost, "/v1/projects/"+tc.project+"/workloads", tc.token, tc.doc)
			require.Equal(t, tc.status, status, "%s", body)
			if tc.field != "" {
				e := errorBody(t, body)
				named := false
				for _, f := range e.Fields {
					named = named || strings.HasSuffix(f.Field, tc.field)
				}
				assert.True(t, named, "no field %s in %s", tc.field, body)
			}
			assert.NotContains(t, string(body), value)
			rev2, keys2 := workloadsRevision(t)
			assert.Equal(t, rev, rev2, "the workloads bucket's revision moved")
			assert.ElementsMatch(t, keys, keys2, "the workloads bucket's keys")
		})
	}

	// No cluster holds b's Secret (nothing runs that uses it), and a's
	// namespace holds no copy of it.
	for _, c := range reg.Env.Clusters {
		for _, p := range []string{a, b} {
			_, err := c.Client.CoreV1().Secrets(api.Namespace(p)).Get(t.Context(), "db", metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "%s: Secret %s/db: %v", c.Name, api.Namespace(p), err)
		}
	}
	for _, name := range []string{"steal-env", "steal-vol", "steal-conf", "steal-path", "hostpath", "hostpath-secret", "projected", "traversal", "cluster-secret"} {
		nothingInClusters(t, a, name)
		nothingInClusters(t, b, name)
	}

	// Every read of the Secret, by its own project's developer and by the
	// admin, holds its keys and never its value.
	reads := 0
	for _, token := range []string{devB, reg.AdminToken} {
		for _, path := range []string{
			"/v1/projects/" + b + "/workloads/Secret/db",
			"/v1/projects/" + b + "/workloads?kind=Secret",
			"/v1/projects/" + b + "/workloads",
			"/v1/projects/" + b + "/workloads/Secret/db/events",
		} {
			status, body := podsRequest(t, http.MethodGet, path, token, nil)
			require.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
			assert.NotContains(t, string(body), value, "GET %s", path)
			assert.NotContains(t, string(body), `"sealed"`, "GET %s", path)
			if strings.Contains(path, "Secret") && !strings.HasSuffix(path, "events") {
				assert.Contains(t, string(body), "PASSWORD", "GET %s names no key", path)
			}
			reads++
		}
	}
	// An update's reply, too.
	status, body := podsRequest(t, http.MethodPut, "/v1/projects/"+b+"/workloads/Secret/db", devB, csSecret("db", value+"-2"))
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.NotContains(t, string(body), value)
	t.Logf("%d reads and an update of the Secret hold no value", reads)
}
