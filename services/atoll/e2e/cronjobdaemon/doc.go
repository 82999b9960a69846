// Package cronjobdaemon holds the end-to-end tests of the CronJob and the
// Daemon kinds, in a region of its own with small member clusters (zones
// a, b and c, nodesPerZone nodes each): the CronJob test freezes a member
// cluster's API server for minutes, which must not disturb the tests of
// package region, and the Daemon test adds nodes to one cluster.
package cronjobdaemon
