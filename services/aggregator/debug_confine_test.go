package aggregator

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/debugstream"
)

// TestExecOnlyIntoOwnContainers: exec reaches the workload's main
// containers only, never an init container or the platform's native
// sidecar (an init container that keeps running).
func TestExecOnlyIntoOwnContainers(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "setup"},
			{Name: "atoll-log-shipper", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
		},
		Containers: []corev1.Container{{Name: "web"}, {Name: "proxy"}},
	}}
	tests := []struct {
		container string
		code      int // 0: allowed
	}{
		{"web", 0},
		{"proxy", 0},
		{"setup", http.StatusForbidden},
		{"atoll-log-shipper", http.StatusForbidden},
		{"nope", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.container, func(t *testing.T) {
			err := execContainer(viewOf(pod), tt.container)
			var de *debugstream.Error
			switch {
			case tt.code == 0 && err != nil:
				t.Errorf("refused: %v", err)
			case tt.code != 0 && (!errors.As(err, &de) || de.Code != tt.code):
				t.Errorf("err %v, want %d", err, tt.code)
			}
			if !hasContainer(viewOf(pod), tt.container) && tt.code != http.StatusNotFound {
				t.Errorf("logs cannot read %s", tt.container)
			}
		})
	}
}

// TestLogSessionCap: a session of more containers than the limit is a
// 422 that names the ways to narrow it; at the limit it is served.
func TestLogSessionCap(t *testing.T) {
	b := &debugBackend{s: &Service{maxLogContainers: 3}, clusters: map[string]*debugCluster{
		"zone-a": {name: "zone-a", zone: "a"}, "zone-b": {name: "zone-b", zone: "b"},
	}}
	if err := b.capLogs(debugstream.LogRequest{}, make([]debugstream.LogSource, 3)); err != nil {
		t.Errorf("3 containers with a limit of 3: %v", err)
	}
	err := b.capLogs(debugstream.LogRequest{}, make([]debugstream.LogSource, 4))
	var de *debugstream.Error
	if !errors.As(err, &de) || de.Code != http.StatusUnprocessableEntity {
		t.Fatalf("4 containers with a limit of 3: %v, want 422", err)
	}
	for _, want := range []string{"4 containers", "container", "zone (one of a, b)", "pod"} {
		if !strings.Contains(de.Message, want) {
			t.Errorf("message %q lacks %q", de.Message, want)
		}
	}
	b.s.maxLogContainers = 0 // the default
	if err := b.capLogs(debugstream.LogRequest{}, make([]debugstream.LogSource, DefaultMaxLogContainers+1)); err == nil {
		t.Errorf("%d containers under the default limit", DefaultMaxLogContainers+1)
	}
}
