package api

// Payloads of the request/reply endpoints that have no type of their own
// elsewhere in this package; the endpoints themselves are described in
// libs/bus (contract.go).

// Ack is the reply of an endpoint that only acknowledges: one flag naming
// what it did ({"reserved": true}, {"deleted": true}).
type Ack map[string]bool

// RemediationStatusRequest asks the remediation service for one member
// cluster's status, or every cluster's ("").
type RemediationStatusRequest struct {
	Cluster string `json:"cluster,omitempty"`
}

// RemediationPauseRequest pauses or resumes new remediation actions in a
// member cluster, or the region ("").
type RemediationPauseRequest struct {
	Cluster string `json:"cluster,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// By is who asked (the gateway's authenticated user, an operator).
	By string `json:"by,omitempty"`
}
