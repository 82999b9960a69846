// Package clusters describes the region's member clusters and how the
// cluster-facing services reach them.
package clusters

import (
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Member is one member cluster of the region.
type Member struct {
	// Name is the cluster's name, a DNS label.
	Name string `json:"name"`
	// Zone is the cluster's failure domain.
	Zone string `json:"zone"`
	// Labels are matched by workloads' cluster selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// Kubeconfig is the path of a kubeconfig file for the cluster.
	Kubeconfig string `json:"kubeconfig"`
}

// Members is the region's member clusters.
type Members []Member

// Load reads a YAML list of members.
func Load(path string) (Members, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's --clusters flag, read as that user
	if err != nil {
		return nil, fmt.Errorf("read clusters file: %w", err)
	}
	var ms Members
	if err := yaml.UnmarshalStrict(b, &ms); err != nil {
		return nil, fmt.Errorf("parse clusters file %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, m := range ms {
		if m.Name == "" || m.Zone == "" || m.Kubeconfig == "" {
			return nil, fmt.Errorf("clusters file %s: entry %d needs name, zone and kubeconfig", path, i)
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("clusters file %s: cluster %q listed twice", path, m.Name)
		}
		seen[m.Name] = true
	}
	return ms, nil
}

// RESTConfig returns a client configuration without client-side rate
// limits and with a per-request timeout.
func (m Member) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster %s kubeconfig: %w", m.Name, err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 15 * time.Second
	return cfg, nil
}

// Client returns a clientset for the member.
func (m Member) Client() (kubernetes.Interface, *rest.Config, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s client: %w", m.Name, err)
	}
	return cs, cfg, nil
}
