// Package remediation holds the end-to-end tests of the remediation
// service (issue 14), in a region of its own (two replicas of every
// service, three member clusters of nodesPerZone KWOK nodes each) so
// that the nodes it breaks, replaces and freezes never disturb the
// tests of package region.
//
// Each test writes the remediation policy it needs (short durations:
// time is the subject) into the remediation bucket, breaks nodes by
// patching their conditions (KWOK rewrites a Ready node's conditions only
// every 600 s or more, far beyond a test), and watches the node subjects
// (atoll.node.<cluster>.<node>.<event>) and the member clusters. Nodes
// are put back to Ready at the end of each test.
//
// The tests need member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skip under -short.
package remediation
