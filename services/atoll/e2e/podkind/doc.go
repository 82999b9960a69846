// Package podkind holds the end-to-end tests of the Pod kind, in a region
// of its own: three member clusters (zones a, b and c, nodesPerZone nodes
// each) whose KWOK runs the default stages plus pod-image-update
// (testdata/stages.yaml), which reflects an in-place image change in the
// Pod's status as a kubelet would (new image, that container's restart
// count up by one). The tests cover an image update applied in place (a
// main container's by the user, a managed sidecar's by the platform), a
// Pod's persistent volume, and the Pod's failover when its cluster's API
// server is frozen; the last freezes a cluster, which must not disturb
// other packages' tests.
package podkind
