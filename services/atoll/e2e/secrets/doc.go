// Package secrets holds the end-to-end tests of the Config and Secret
// kinds' storage and of their values' way into the pods of every zone, in
// a region whose services run as processes of their own binaries (zones
// a, b, c), so that a test can read the gateway's process environment,
// command line, open files and mounts as production runs it.
package secrets
