// Package upgrade holds the end-to-end tests of the upgrade service
// (issue 15), in a region of its own (two replicas of every service,
// three member clusters of nodesPerZone KWOK nodes each): a rotation plan
// is written into the upgrade bucket (as a platform admin would) and the
// member clusters are sampled while the service rotates their nodes.
//
// The tests need member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skip under -short.
package upgrade
