package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An audit log as kube-apiserver writes it (one JSON event per line).
const auditLog = `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/atoll-x/secrets/tenant","verb":"get","user":{"username":"atoll-remediation","groups":["atoll:services","system:authenticated"]},"userAgent":"remediation/v0.0.0","responseStatus":{"metadata":{},"status":"Failure","message":"secrets \"tenant\" is forbidden","reason":"Forbidden","code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/nodes","verb":"list","user":{"username":"atoll-remediation"},"userAgent":"remediation/v0.0.0","responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/nodes/n1","verb":"delete","user":{"username":"atoll-propagator"},"userAgent":"atoll-expect-forbidden/propagator","responseStatus":{"metadata":{},"code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/nodes/n1","verb":"delete","user":{"username":"kwok-admin"},"userAgent":"kubectl","responseStatus":{"metadata":{},"code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/kube-system/deployments","verb":"create","user":{"username":"atoll-propagator"},"userAgent":"propagator","responseStatus":{"metadata":{},"message":"denied by policy","code":403}}
`

// TestForbidden: the services' 403s are found, a 200, another user's 403
// and one refused on purpose (ForbiddenAgentPrefix) are not.
func TestForbidden(t *testing.T) {
	e := &Env{opts: Options{WorkDir: t.TempDir()}}
	c := &Cluster{Name: "zone-a", kwokID: "atoll-1-1-zone-a", env: e}
	e.Clusters = []*Cluster{c}
	got, err := e.Forbidden()
	require.NoError(t, err)
	require.Empty(t, got, "no audit log yet")
	require.NoError(t, os.MkdirAll(filepath.Join(c.Dir(), "logs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.Dir(), "logs", "audit.log"), []byte(auditLog), 0o644))
	got, err = e.Forbidden()
	require.NoError(t, err)
	require.Equal(t, []string{
		`zone-a: atoll-remediation get /api/v1/namespaces/atoll-x/secrets/tenant: secrets "tenant" is forbidden`,
		`zone-a: atoll-propagator create /apis/apps/v1/namespaces/kube-system/deployments: denied by policy`,
	}, got)
}

func TestAuditPolicyNamesEveryService(t *testing.T) {
	p := auditPolicy()
	for _, u := range []string{"atoll-propagator", "atoll-aggregator", "atoll-remediation", "atoll-upgrade"} {
		require.Contains(t, p, u)
	}
}
