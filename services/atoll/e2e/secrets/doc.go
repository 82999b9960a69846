// Package secrets holds the end-to-end tests of the Config and Secret
// kinds' storage, in a region whose services run as processes of their
// own binaries (one member cluster: a Config or a Secret is placed
// nowhere), so that a test can read the gateway's process environment
// and command line as production runs it.
package secrets
