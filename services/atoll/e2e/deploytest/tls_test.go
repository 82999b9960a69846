package deploytest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atoll.dev/services/atoll/admin"
)

// makeTLS fills secrets/tls the way deploy/README.md says: atoll-admin
// bootstrap tls.
func makeTLS(t *testing.T, dir string) {
	t.Helper()
	root := admin.Root()
	root.SetArgs([]string{"bootstrap", "tls", "--dir", dir,
		"--nats-hosts", "nats-0.nats.atoll-system.svc,nats-1.nats.atoll-system.svc,nats-2.nats.atoll-system.svc,*.nats.atoll-system.svc",
		"--gateway-hosts", "atoll.example.com,atoll-gateway.atoll-system.svc"})
	root.SetOut(&bytes.Buffer{})
	if err := root.Execute(); err != nil {
		t.Fatalf("atoll-admin bootstrap tls: %v", err)
	}
}

// NATS takes TLS clients and routes only from its own certificate, its
// monitoring port on loopback; every client verifies it with the region's
// CA; the gateway serves HTTPS from its Secret.
func TestManifestsUseTLS(t *testing.T) {
	manifests := build(t)
	x := indexOf(t, objects(t, manifests))
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "k8s", "nats.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"http: 127.0.0.1:8222", "verify: true", "cert_file: /etc/nats/tls/nats.crt"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("nats.conf does not say %q", want)
		}
	}
	if s := x.secrets["atoll-nats-tls"]; s == nil || s.Data["nats.key"] == nil || s.Data["ca.crt"] == nil {
		t.Error("no Secret atoll-nats-tls with nats.key and ca.crt")
	}
	if s := x.secrets["atoll-gateway-tls"]; s == nil || s.Type != "kubernetes.io/tls" || s.Data["tls.key"] == nil {
		t.Error("no kubernetes.io/tls Secret atoll-gateway-tls")
	}
	for name, d := range x.deployments {
		if d.Spec.Template.Labels["atoll.dev/nats-client"] != "true" {
			continue // not a NATS client (the canary: the gateway's)
		}
		env := map[string]string{}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["ATOLL_NATS_CA"] != "/etc/atoll/ca/ca.crt" {
			t.Errorf("%s: ATOLL_NATS_CA=%q, want the region's CA", name, env["ATOLL_NATS_CA"])
		}
		if name == "atoll-gateway" && (env["ATOLL_GATEWAY_TLS_CERT"] == "" || env["ATOLL_GATEWAY_TLS_KEY"] == "") {
			t.Error("the gateway has no certificate: it would refuse to start")
		}
	}
	if args := strings.Join(x.jobs["atoll-bootstrap"].Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--nats-ca=") {
		t.Errorf("bootstrap args %q: no --nats-ca", args)
	}
}
