package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// promConfig is the part of a Prometheus configuration these tests read.
type promConfig struct {
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName      string `json:"job_name"`
		DNSSDConfigs []struct {
			Names []string `json:"names"`
			Port  int      `json:"port"`
		} `json:"dns_sd_configs"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Compose's Prometheus scrapes every replica of every service (Docker's
// DNS answers a service's name with each replica's address) on its admin
// port, and the canary; compose.yaml runs both.
func TestComposePrometheusScrapesEveryService(t *testing.T) {
	var cfg promConfig
	readYAML(t, filepath.Join(root, "deploy", "prometheus", "compose.yml"), &cfg)
	dns := map[string]int{}
	static := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				dns[n] = d.Port
			}
		}
		for _, s := range sc.StaticConfigs {
			static[sc.JobName] = append(static[sc.JobName], s.Targets...)
		}
	}
	for _, svc := range services(t) {
		if dns[svc] != 9090 {
			t.Errorf("no job finds %s's replicas by DNS on port 9090 (ATOLL_ADMIN_LISTEN)", svc)
		}
	}
	if !slices.Contains(static["atoll-canary"], "canary:9464") {
		t.Errorf("job atoll-canary does not scrape canary:9464 (the rules' AtollCanaryDown looks for that job): %v", static)
	}
	var c composeFile
	readYAML(t, filepath.Join(root, "compose.yaml"), &c)
	for _, name := range []string{"canary", "prometheus"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml has no service %s", name)
		}
	}
}

// deploy/k8s/operator's PrometheusRule holds exactly the rule groups of
// deploy/prometheus/rules (hack/prometheus-rule.sh), and its objects and
// deploy/k8s/prometheus's build.
func TestOperatorRulesMatchTheRuleFiles(t *testing.T) {
	type groups struct {
		Groups []any `json:"groups"`
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "prometheus", "rules", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	var want []any
	for _, f := range files {
		var g groups
		readYAML(t, f, &g)
		want = append(want, g.Groups...)
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec groups `json:"spec"`
	}
	readYAML(t, filepath.Join(root, "deploy", "k8s", "operator", "prometheusrule.yaml"), &rule)
	if rule.Kind != "PrometheusRule" {
		t.Errorf("kind %q", rule.Kind)
	}
	if diff := cmp.Diff(want, rule.Spec.Groups); diff != "" {
		t.Errorf("deploy/k8s/operator/prometheusrule.yaml is stale, run make prometheus-rule (-want +got):\n%s", diff)
	}
	for _, dir := range []string{"operator", "prometheus"} {
		out, err := exec.Command(kubectl(t), "kustomize", filepath.Join(root, "deploy", "k8s", dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize deploy/k8s/%s: %v\n%s", dir, err, out)
		}
		if dir == "prometheus" && !strings.Contains(string(out), "name: prometheus-rules-") {
			t.Error("deploy/k8s/prometheus holds no prometheus-rules ConfigMap")
		}
	}
}
