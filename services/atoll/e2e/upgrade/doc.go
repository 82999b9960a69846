// Package upgrade holds the end-to-end tests of the upgrade service
// (issue 15), in a region of its own (two replicas of every service,
// three member clusters of nodesPerZone KWOK nodes each): a rotation plan
// is written into the upgrade bucket (as a platform admin would) and the
// member clusters are sampled while the service rotates their nodes.
// TestRotationThroughAPIAndConsole drives a plan through the Compute API
// (the gateway's NATS user writes plan.* and ctl.*) and the console's
// Upgrades view (with Chromium when installed); TestRotationAtScale adds
// two pools of 50 nodes to each cluster and rotates the 300 nodes with
// percent-based waves, logging the duration and nodes per minute.
//
// The tests need member clusters (libs/testenv: the binaries `make tools`
// builds, $ATOLL_BIN_DIR) and skip under -short.
package upgrade
