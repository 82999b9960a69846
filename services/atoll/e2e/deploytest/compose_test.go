package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		User        string            `json:"user"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		Networks    []string          `json:"networks"`
	} `json:"services"`
	Networks map[string]struct {
		Internal bool `json:"internal"`
	} `json:"networks"`
}

// eventsIssuer is the events issuer's key file (bus.CreateAuth).
const eventsIssuer = "events-issuer.nk"

// compose.yaml runs every service with a main, each as its own NATS user
// reading only its own credentials, with the Makefile's SERVICES (images,
// scaling, the fault test's kills) listing it; only the cluster-facing
// services reach the member clusters, whose network is internal.
func TestComposePackagesEveryService(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SERVICES \?= (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no SERVICES ?= line in the Makefile")
	}
	listed := strings.Fields(string(m[1]))
	for _, svc := range services(t) {
		t.Run(svc, func(t *testing.T) {
			if !slices.Contains(listed, svc) {
				t.Errorf("the Makefile's SERVICES does not list %s", svc)
			}
			s, ok := c.Services[svc]
			if !ok {
				t.Fatalf("compose.yaml has no service %s", svc)
			}
			if !strings.HasPrefix(s.Image, "atoll/"+svc+":") {
				t.Errorf("image %q", s.Image)
			}
			creds := "/etc/atoll/nats/" + svc + ".nk"
			if s.Environment["ATOLL_NATS_CREDS"] != creds {
				t.Errorf("ATOLL_NATS_CREDS=%q, want %s", s.Environment["ATOLL_NATS_CREDS"], creds)
			}
			var mounted []string
			for _, v := range s.Volumes {
				// The gateway alone holds the events issuer's key: it
				// answers the NATS auth callout (eventcreds.go).
				if strings.Contains(v, "secrets/nats/"+eventsIssuer+":") {
					if svc != "gateway" {
						t.Errorf("mounts the events issuer's key (%s): only the gateway may", v)
					}
					continue
				}
				if strings.Contains(v, "secrets/nats/") {
					mounted = append(mounted, v)
				}
			}
			if len(mounted) != 1 || !strings.Contains(mounted[0], "secrets/nats/"+svc+".nk:"+creds+":ro") {
				t.Errorf("mounts NATS credentials %v, want only its own", mounted)
			}
			known := readVariables(t, filepath.Join(root, "services", svc, "cmd", svc, "main.go"), filepath.Join(root, "libs", "daemon", "daemon.go"))
			for v := range s.Environment {
				if !known[v] {
					t.Errorf("sets %s, which %s does not read", v, svc)
				}
			}
			members := slices.Contains(s.Networks, "members")
			if want := clusterFacing(t, svc); members != want {
				t.Errorf("on the members network: %v, want %v", members, want)
			}
			// Member credentials: a cluster-facing service its own, no other any.
			var kubeconfigs []string
			for _, v := range s.Volumes {
				if strings.HasPrefix(v, "kubeconfigs") {
					kubeconfigs = append(kubeconfigs, v)
				}
			}
			var want []string
			if clusterFacing(t, svc) {
				want = []string{"kubeconfigs-" + svc + ":/etc/atoll/kubeconfigs:ro"}
			}
			if !slices.Equal(kubeconfigs, want) {
				t.Errorf("mounts member credentials %v, want %v", kubeconfigs, want)
			}
		})
	}
	if !c.Networks["members"].Internal {
		t.Error("the members network is not internal")
	}
	for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
		if s, ok := c.Services[z]; !ok || !slices.Equal(s.Networks, []string{"members"}) {
			t.Errorf("member cluster %s missing or not on the members network alone", z)
		}
	}
	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		if _, ok := c.Services[n]; !ok {
			t.Errorf("NATS server %s missing", n)
		}
	}
}
