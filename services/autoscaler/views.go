package autoscaler

import (
	"encoding/json"
)

// What the autoscaler keeps of a Scaler's App and of its status: only
// these few fields, and only of the Apps a Scaler names (keyed mirrors,
// autoscaler.go). Decoded in full (api.Decode and api.Status), mirrors of
// every App held 412-460 MB at 100,000 Apps and the service was ready
// 3.5-6.2 s after a restart (RegionScale); projected, 111-166 MB and
// about 1.5 s.

// appView is what a Scaler's reconcile reads of its App.
type appView struct {
	Generation      int64
	Pods            int32 // the App's replicas (api.AppSpec.Pods)
	Stopped, Paused bool  // api.Control
}

// appDoc is the part of a stored App document appView comes from.
type appDoc struct {
	Metadata struct {
		Generation int64 `json:"generation"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int32 `json:"replicas"`
	} `json:"spec"`
	Control struct {
		Stopped bool `json:"stopped"`
		Paused  bool `json:"paused"`
	} `json:"control"`
}

func decodeApp(b []byte) (appView, error) {
	var d appDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return appView{}, err
	}
	v := appView{Generation: d.Metadata.Generation, Pods: 1, Stopped: d.Control.Stopped, Paused: d.Control.Paused}
	if d.Spec.Replicas != nil { // as api.AppSpec.Pods
		v.Pods = *d.Spec.Replicas
	}
	return v, nil
}

// statusView is what a Scaler's reconcile reads of its App's status.
type statusView struct {
	Generation int64 `json:"generation"`
	Ready      int32 `json:"ready"`
}

func decodeStatus(b []byte) (statusView, error) {
	var st statusView
	err := json.Unmarshal(b, &st)
	return st, err
}
