// Package stateful holds the end-to-end tests of Apps with claim
// templates (a StatefulSet per member cluster, ordinal ranges per zone),
// in a region of its own: three member clusters (zones a, b and c,
// nodesPerZone nodes each) with KWOK's default stages, where the tests
// create static PersistentVolumes of class "manual" for the claims to
// bind (no provisioner runs in the test clusters). The tests cover a
// replica's stable ordinal, claim and zone across a pod's deletion, scale
// and a rollout; a lost zone's replica waiting (onZoneLoss Wait); claims
// counted towards the storage quota; and mistakes refused with 422. One
// test freezes a cluster's API server, which must not disturb other
// packages' tests.
package stateful
