package clusters_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/clusters"
)

// testCA makes a CA as kubeadm (RSA, PKCS#1) or another tool (EC) would.
func testCA(t *testing.T, rsaKey bool) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "member-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	var (
		pub any
		der []byte
		blk *pem.Block
	)
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub, blk = &k.PublicKey, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
		der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, k)
		if err != nil {
			t.Fatal(err)
		}
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		pub, blk = &k.PublicKey, &pem.Block{Type: "PRIVATE KEY", Bytes: b}
		der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, k)
		if err != nil {
			t.Fatal(err)
		}
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(blk)
}

func TestIssueCredential(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rsa     bool
		service string
	}{{"rsa CA", true, clusters.Aggregator}, {"ec CA", false, clusters.Remediation}} {
		t.Run(tc.name, func(t *testing.T) {
			caPEM, caKey := testCA(t, tc.rsa)
			cred, err := clusters.IssueCredential(caPEM, caKey, tc.service, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			blk, _ := pem.Decode(cred.Cert)
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("verify against the member CA: %v", err)
			}
			got := []string{cert.Subject.CommonName, cert.Subject.Organization[0]}
			if diff := cmp.Diff([]string{"atoll-" + tc.service, clusters.Group}, got); diff != "" {
				t.Errorf("subject (-want +got):\n%s", diff)
			}
			// The kubeconfig carries it, and a member's client uses it.
			p := filepath.Join(t.TempDir(), "k", tc.service+".kubeconfig")
			if err := clusters.WriteKubeconfig(p, "zone-a", "https://127.0.0.1:6443", caPEM, tc.service, cred); err != nil {
				t.Fatal(err)
			}
			cfg, err := clusters.Member{Name: "zone-a", Zone: "a", Kubeconfig: p}.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if string(cfg.CertData) != string(cred.Cert) || string(cfg.KeyData) != string(cred.Key) || string(cfg.CAData) != string(caPEM) {
				t.Error("the kubeconfig does not carry the credential and CA")
			}
		})
	}
}

func TestIssueCredentialRefusesGarbage(t *testing.T) {
	caPEM, caKey := testCA(t, false)
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{{"no cert", []byte("x"), caKey}, {"no key", caPEM, []byte("x")}, {"key is a cert", caPEM, caPEM}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := clusters.IssueCredential(tc.cert, tc.key, clusters.Propagator, time.Now()); err == nil {
				t.Error("issued with a broken CA")
			}
		})
	}
}

// TestRolesLeastPrivilege: no service reads Secrets or ConfigMaps but
// through the propagator's config role, bound per project namespace; none
// has a wildcard, only the propagator writes workloads, only remediation
// and upgrade touch nodes beyond reading, and pods/log and pods/exec are
// only in the debug role bound per project namespace.
func TestRolesLeastPrivilege(t *testing.T) {
	roles := clusters.Roles()
	type grant struct{ role, verb, resource string }
	has := map[grant]bool{}
	for name, rules := range roles {
		for _, r := range rules {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					has[grant{name, v, res}] = true
				}
				if res == "*" || slices.Contains(r.Verbs, "*") || slices.Contains(r.APIGroups, "*") {
					t.Errorf("%s: wildcard rule %+v", name, r)
				}
				if (res == "secrets" || res == "configmaps") && name != clusters.PropagatorConfigRole || res == "serviceaccounts/token" {
					t.Errorf("%s: grants %s", name, res)
				}
			}
		}
	}
	for _, tc := range []struct {
		g    grant
		want bool
	}{
		{grant{"atoll-propagator", "create", "deployments"}, true},
		{grant{"atoll-propagator", "patch", "namespaces"}, true},
		{grant{"atoll-propagator", "delete", "namespaces"}, true}, // project namespaces only (NamespacePolicies)
		{grant{"atoll-propagator", "delete", "nodes"}, false},
		{grant{"atoll-propagator", "get", "pods/log"}, false},
		{grant{"atoll-propagator", "create", "ingresses"}, true},
		{grant{"atoll-propagator", "delete", "ingresses"}, true},
		{grant{"atoll-propagator", "update", "ingresses/status"}, false},
		{grant{"atoll-propagator", "create", "ingressclasses"}, false},
		{grant{"atoll-aggregator", "create", "deployments"}, false},
		{grant{"atoll-aggregator", "watch", "ingresses"}, true},
		{grant{"atoll-aggregator", "patch", "ingresses"}, false},
		{grant{"atoll-aggregator", "list", "pods"}, true},
		{grant{"atoll-aggregator", "get", "pods/log"}, false},
		{grant{"atoll-aggregator", "create", "pods/exec"}, false},
		{grant{clusters.AggregatorDebugRole, "get", "pods/log"}, true},
		{grant{clusters.AggregatorDebugRole, "create", "pods/exec"}, true},
		{grant{clusters.PropagatorConfigRole, "list", "secrets"}, true},
		{grant{clusters.PropagatorConfigRole, "patch", "configmaps"}, true},
		{grant{"atoll-propagator", "bind", "clusterroles"}, true},
		{grant{"atoll-remediation", "patch", "nodes"}, true},
		{grant{"atoll-remediation", "delete", "nodes"}, true},
		{grant{"atoll-remediation", "create", "pods/eviction"}, true},
		{grant{"atoll-remediation", "create", "pods"}, false},
		{grant{"atoll-upgrade", "create", "pods/eviction"}, true},
		{grant{"atoll-upgrade", "patch", "deployments"}, false},
	} {
		if has[tc.g] != tc.want {
			t.Errorf("%s may %s %s: %v, want %v", tc.g.role, tc.g.verb, tc.g.resource, has[tc.g], tc.want)
		}
	}
	for _, b := range clusters.ClusterRoleBindings() {
		if len(b.Subjects) != 1 || b.Subjects[0].Name != b.RoleRef.Name || b.Subjects[0].Kind != "User" {
			t.Errorf("binding %s: %+v to %s", b.Name, b.Subjects, b.RoleRef.Name)
		}
	}
}

func TestRESTConfigRateLimit(t *testing.T) {
	caPEM, caKey := testCA(t, false)
	cred, err := clusters.IssueCredential(caPEM, caKey, clusters.Upgrade, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "upgrade.kubeconfig")
	if err := clusters.WriteKubeconfig(p, "zone-a", "https://127.0.0.1:6443", caPEM, clusters.Upgrade, cred); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"defaults", 0, 0, clusters.DefaultQPS, clusters.DefaultBurst},
		{"configured", 20, 40, 20, 40},
		{"burst below qps defaulted", 500, 0, 500, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := clusters.Member{Name: "zone-a", Zone: "a", Kubeconfig: p, QPS: tc.qps, Burst: tc.burst}.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst {
				t.Errorf("QPS %v burst %d, want %v and %d", cfg.QPS, cfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
