// Package projects holds the end-to-end tests of projects as a resource
// and of their members' roles: a region of two replicas of every service
// (so a role change is checked at each gateway replica) with self-service
// projects on, and one small member cluster, since no test here needs
// its workloads to run.
package projects

import (
	"testing"

	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/region"
)

var reg *region.Region

// maxPerUser is the self-service limit the region's gateways run with.
const maxPerUser = 2

func TestMain(m *testing.M) {
	e2e.Main(m, e2e.Package{Name: "projects", Options: region.Options{Zones: []string{"a"}, Nodes: 1, Replicas: 2,
		SelfServiceProjects: true, MaxProjectsPerUser: maxPerUser}}, func(e *e2e.Env) { reg = e.Region })
}
