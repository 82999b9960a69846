// Package autoscale holds the end-to-end tests of the autoscaler: a whole
// region (every service, one replica each) on three member clusters
// running metrics-server, where the tests set pods' simulated CPU through
// their annotations (libs/testenv) and push custom metrics through the
// gateway, and watch Scalers move their Apps through admission.
package autoscale
