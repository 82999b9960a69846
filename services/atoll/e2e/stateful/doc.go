// Package stateful holds the end-to-end tests of Apps with claim
// templates (a StatefulSet per member cluster, ordinal ranges per zone),
// in a region of its own: three member clusters (zones a, b and c,
// nodesPerZone nodes each) with KWOK's default stages, where the tests
// create static PersistentVolumes of class "manual" for the claims to
// bind (no provisioner runs in the test clusters). One test freezes a
// cluster's API server, which must not disturb other packages' tests.
package stateful
