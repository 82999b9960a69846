package api

import "time"

// A Scaler's recorded decisions: the autoscaler writes them in its
// document of the Scaler in the scalers bucket (field "decisions", oldest
// first) and the gateway serves them (GET .../scalers/{name}/history).

// ScalerProposal is one metric's proposal in a decision.
type ScalerProposal struct {
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Target   float64 `json:"target"`
	Ratio    float64 `json:"ratio"`
	Replicas int32   `json:"replicas"`
	// State is ok, within-tolerance, failed-hold or failed-fallback.
	State string `json:"state"`
	// Age is how old the sample was (zero without one).
	Age time.Duration `json:"age,omitempty"`
}

// ScalerDecision is one evaluation of a Scaler: inputs, proposals and
// the replicas chosen.
type ScalerDecision struct {
	At      time.Time `json:"at"`
	Current int32     `json:"current"`
	Ready   int32     `json:"ready"`
	// Proposals are each metric's, in the spec's order.
	Proposals []ScalerProposal `json:"proposals,omitempty"`
	// Floor is the highest open schedule's replicas (0: none open) and
	// FloorSchedule names it.
	Floor         int32  `json:"floor,omitempty"`
	FloorSchedule string `json:"floorSchedule,omitempty"`
	// Raw is the max of the proposals and the floor, within [min, max].
	Raw int32 `json:"raw"`
	// Stabilized is Raw after the stabilization windows.
	Stabilized int32 `json:"stabilized"`
	// Desired is the replicas chosen.
	Desired int32 `json:"desired"`
	// Reason says why Desired, for a human.
	Reason string `json:"reason"`
	// Limited names what held Desired back from Stabilized (a rate
	// policy, the cooldown, min or max); empty when nothing did.
	Limited string `json:"limited,omitempty"`
}

// Changed reports whether the decision changes the replicas.
func (d *ScalerDecision) Changed() bool { return d.Desired != d.Current }

// ScalerRecord is one decision and what came of it.
type ScalerRecord struct {
	ScalerDecision
	// Outcome is none, scaled, refused or skipped.
	Outcome string `json:"outcome"`
	// Detail is admission's refusal or why the evaluation was skipped.
	Detail string `json:"detail,omitempty"`
	// Generation is the Scaler's generation evaluated.
	Generation int64 `json:"generation"`
}

// ScalerDecisions is the part of the autoscaler's document of a Scaler
// that others read: its recent decisions, oldest first.
type ScalerDecisions struct {
	Decisions []ScalerRecord `json:"decisions,omitempty"`
}
